//! A node's usage samples in time order, one row per sample time with a value per resource,
//! giving AVG and STD over trailing windows.
//!
//! At 65,000 nodes with metrics-server's 15 s resolution every node holds 60 samples of CPU and
//! 60 of memory, which the 65,000-node memory budget must hold: as one `(f64, f64)` ring per
//! resource that was 32 bytes a sample time (1,920 bytes a node, ~119 MiB), and the five-slot
//! map of rings itself 240 bytes.
//! Here the time is stored once per row, as milliseconds after the ring's base time in a `u32`,
//! and the values of every resource the node reports side by side: 20 bytes a row for two
//! resources. Statistics are the same numbers (the same values summed in the same order);
//! sample times are held to the millisecond (metrics-server's are whole seconds or
//! milliseconds; the host source's are truncated below that).

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::{Resource, Stat};

/// The most samples (rows) one node keeps: 15 minutes at one sample every 0.5 s.
pub const DEFAULT_CAP: usize = 1800;

/// Column of a resource in `Resource::ALL` order (its bit in [`Rings`]'s column set).
fn bit(r: Resource) -> u8 {
    let i = Resource::ALL.iter().position(|&x| x == r).unwrap_or(0);
    1 << i
}

/// Samples of one node. Rows older than `horizon` behind the newest row are dropped, and at
/// most `cap` rows are kept. A resource without a value at a row's time holds NaN there (never
/// a valid value: the hub validates every value before it is recorded).
#[derive(Debug, Clone)]
pub struct Rings {
    /// Unix time in milliseconds that the offsets in `times` count from.
    base_ms: i64,
    /// Each row's time, milliseconds after `base_ms`, ascending.
    times: VecDeque<u32>,
    /// Values row by row, one per column (resource in `cols`, in `Resource::ALL` order).
    values: VecDeque<f64>,
    /// The resources with a column, as bits in `Resource::ALL` order.
    cols: u8,
    horizon_ms: u32,
    cap: u32,
}

impl Rings {
    pub fn new(horizon: Duration, cap: usize) -> Self {
        Rings {
            base_ms: 0,
            times: VecDeque::new(),
            values: VecDeque::new(),
            cols: 0,
            horizon_ms: u32::try_from(horizon.as_millis())
                .unwrap_or(u32::MAX)
                .max(1),
            cap: u32::try_from(cap.max(1)).unwrap_or(u32::MAX),
        }
    }

    fn width(&self) -> usize {
        self.cols.count_ones() as usize
    }

    /// Index of `r`'s column, if it has one.
    fn column(&self, r: Resource) -> Option<usize> {
        let b = bit(r);
        (self.cols & b != 0).then(|| (self.cols & (b - 1)).count_ones() as usize)
    }

    /// Adds a column for `r` (NaN in every row so far); returns its index.
    fn add_column(&mut self, r: Resource) -> usize {
        let old = self.width();
        self.cols |= bit(r);
        let at = self.column(r).unwrap_or(old);
        let rows = self.times.len();
        let mut values = VecDeque::with_capacity((old + 1) * rows);
        for row in 0..rows {
            for c in 0..=old {
                let v = match c.cmp(&at) {
                    std::cmp::Ordering::Less => self.values[row * old + c],
                    std::cmp::Ordering::Equal => f64::NAN,
                    std::cmp::Ordering::Greater => self.values[row * old + c - 1],
                };
                values.push_back(v);
            }
        }
        self.values = values;
        at
    }

    fn time_ms(&self, row: usize) -> i64 {
        self.base_ms + i64::from(self.times[row])
    }

    fn pop_front_row(&mut self) {
        self.times.pop_front();
        for _ in 0..self.width() {
            self.values.pop_front();
        }
    }

    /// Adds `r`'s sample at `t` (Unix seconds). A sample at the time of a row already held sets
    /// that row's value; an older one is put in its place in time order; one at or beyond the
    /// horizon behind the newest row is dropped. Returns whether the samples changed (a sample
    /// equal to the one held at its time leaves them as they were).
    pub fn push(&mut self, r: Resource, t: f64, value: f64) -> bool {
        if !t.is_finite() || value.is_nan() {
            return false;
        }
        let ms = (t * 1000.0).round() as i64;
        let horizon = i64::from(self.horizon_ms);
        let mut changed = false;
        let row = match self.times.back().map(|&b| self.base_ms + i64::from(b)) {
            None => {
                self.base_ms = ms;
                self.push_row(0)
            }
            Some(newest) if ms > newest => {
                while self
                    .times
                    .front()
                    .is_some_and(|&f| self.base_ms + i64::from(f) <= ms - horizon)
                {
                    self.pop_front_row();
                    changed = true;
                }
                match self.times.front().copied() {
                    None => self.base_ms = ms,
                    // Keep offsets small: the front row is within the horizon of `ms`.
                    Some(front) if ms - self.base_ms > i64::from(u32::MAX) => {
                        self.times.iter_mut().for_each(|x| *x -= front);
                        self.base_ms += i64::from(front);
                    }
                    Some(_) => {}
                }
                self.push_row(self.offset(ms))
            }
            Some(newest) if ms <= newest - horizon => return false,
            Some(_) => {
                if ms < self.base_ms {
                    // Within the horizon of the newest row, so every offset still fits.
                    let shift = u32::try_from(self.base_ms - ms).unwrap_or(0);
                    self.times.iter_mut().for_each(|x| *x += shift);
                    self.base_ms = ms;
                }
                let off = self.offset(ms);
                let pos = self.times.partition_point(|&x| x < off);
                if self.times.get(pos) == Some(&off) {
                    pos
                } else {
                    self.insert_row(pos, off)
                }
            }
        };
        let c = match self.column(r) {
            Some(c) => c,
            None => self.add_column(r),
        };
        let w = self.width();
        let slot = &mut self.values[row * w + c];
        changed |= slot.to_bits() != value.to_bits();
        *slot = value;
        while self.times.len() > self.cap as usize {
            self.pop_front_row();
            changed = true;
        }
        changed
    }

    fn offset(&self, ms: i64) -> u32 {
        u32::try_from(ms - self.base_ms).unwrap_or(u32::MAX)
    }

    /// A new newest row at offset `off`, every value NaN; its index.
    fn push_row(&mut self, off: u32) -> usize {
        self.times.push_back(off);
        for _ in 0..self.width() {
            self.values.push_back(f64::NAN);
        }
        self.times.len() - 1
    }

    /// A new row at index `pos` and offset `off`, every value NaN; `pos`.
    fn insert_row(&mut self, pos: usize, off: u32) -> usize {
        self.times.insert(pos, off);
        let w = self.width();
        for _ in 0..w {
            self.values.insert(pos * w, f64::NAN);
        }
        pos
    }

    /// The newest row's time (Unix seconds).
    pub fn newest_time(&self) -> Option<f64> {
        (!self.times.is_empty()).then(|| self.time_ms(self.times.len() - 1) as f64 / 1000.0)
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// `(time offset, value)` of column `c`, row by row (NaN where the row has none).
    fn values_of(&self, c: usize) -> impl DoubleEndedIterator<Item = (u32, f64)> + '_ {
        let w = self.width();
        self.times
            .iter()
            .enumerate()
            .map(move |(row, &t)| (t, self.values[row * w + c]))
    }

    /// Mean and population standard deviation of `r`'s samples newer than `end - window`,
    /// where `end` is the time of `r`'s newest sample. `None` when `r` has none.
    pub fn stat(&self, r: Resource, window: Duration) -> Option<Stat> {
        let c = self.column(r)?;
        let end = self.values_of(c).rev().find(|(_, v)| !v.is_nan())?.0;
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let start = i64::from(end).saturating_sub(window_ms);
        let in_window = || {
            self.values_of(c)
                .filter(move |&(t, v)| i64::from(t) > start && !v.is_nan())
                .map(|(_, v)| v)
        };
        let n = in_window().count();
        if n == 0 {
            return None;
        }
        let nf = n as f64;
        // Shifted by the first value: a constant series gives exactly its value and 0 spread,
        // and large values near each other keep their precision.
        let shift = in_window().next().unwrap_or(0.0);
        let mean_offset = in_window().map(|v| v - shift).sum::<f64>() / nf;
        let avg = shift + mean_offset;
        let var = in_window()
            .map(|v| {
                let d = v - shift - mean_offset;
                d * d
            })
            .sum::<f64>()
            / nf;
        Some(Stat {
            avg,
            std: var.max(0.0).sqrt(),
            samples: std::num::NonZeroU32::new(u32::try_from(n).unwrap_or(u32::MAX))?,
        })
    }
}

/// The quantiles each window gives per resource: p50, p90, p95 and p99.
pub const QUANTILES: [f64; 4] = [0.5, 0.9, 0.95, 0.99];

/// A window's statistics are reported past its mean and spread (quantiles, the hour's max)
/// only when its samples cover at least this share of it: Koordinator's rule (an aggregate
/// needs half of its window).
pub const MIN_COVERAGE: f64 = 0.5;

impl Rings {
    /// The share of `window` (ending at the newest row) its rows cover: from the oldest row in
    /// it to the newest, plus the mean interval between them (each row stands for one
    /// interval), over the window's length; 0 with fewer than two rows, at most 1.
    pub fn coverage(&self, window: Duration) -> f64 {
        let Some(&end) = self.times.back() else {
            return 0.0;
        };
        let window_ms = window.as_millis() as f64;
        let start = f64::from(end) - window_ms;
        let n = self
            .times
            .iter()
            .rev()
            .take_while(|&&t| f64::from(t) > start)
            .count();
        if n < 2 || window_ms <= 0.0 {
            return 0.0;
        }
        let oldest = self.times[self.times.len() - n];
        let span = f64::from(end - oldest);
        (span * n as f64 / (n - 1) as f64 / window_ms).min(1.0)
    }

    /// `r`'s [`QUANTILES`] over the samples [`Rings::stat`] uses, interpolated between the
    /// closest ranks as Prometheus' `quantile_over_time` does; `None` when `r` has none.
    /// `scratch` is reused between calls (no allocation per node).
    pub fn quantiles(
        &self,
        r: Resource,
        window: Duration,
        scratch: &mut Vec<f64>,
    ) -> Option<[f32; 4]> {
        let c = self.column(r)?;
        let end = self.values_of(c).rev().find(|(_, v)| !v.is_nan())?.0;
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let start = i64::from(end).saturating_sub(window_ms);
        scratch.clear();
        scratch.extend(
            self.values_of(c)
                .filter(|&(t, v)| i64::from(t) > start && !v.is_nan())
                .map(|(_, v)| v),
        );
        if scratch.is_empty() {
            return None;
        }
        scratch.sort_unstable_by(f64::total_cmp);
        Some(QUANTILES.map(|q| quantile_of_sorted(scratch, q) as f32))
    }
}

/// The `q` quantile of sorted `xs` (not empty), linearly interpolated between ranks.
fn quantile_of_sorted(xs: &[f64], q: f64) -> f64 {
    let rank = q * (xs.len() - 1) as f64;
    let lower = rank.floor() as usize;
    let upper = (lower + 1).min(xs.len() - 1);
    let weight = rank - lower as f64;
    xs[lower] * (1.0 - weight) + xs[upper] * weight
}

/// The hour's maximum of a node's CPU and memory: the largest sample of each five-minute slot
/// of wall time (aligned to the Unix epoch), twelve slots; the max over the hour is the
/// largest of the slots up to an hour behind the newest one, so it stands for the last 55 to
/// 60 minutes. 104 bytes a node, against 4,800 for an hour of 15-second rows.
#[derive(Debug, Clone)]
pub struct HourMax {
    /// The newest slot's index (Unix time / 5 minutes); `i64::MIN`: no sample yet.
    newest: i64,
    /// Per resource (CPU, memory), each slot's largest sample (NaN: none), to seven digits.
    slots: [[f32; HOUR_SLOTS]; 2],
}

const HOUR_SLOTS: usize = 12;
const SLOT_MS: i64 = 5 * 60 * 1000;

impl Default for HourMax {
    fn default() -> Self {
        HourMax {
            newest: i64::MIN,
            slots: [[f32::NAN; HOUR_SLOTS]; 2],
        }
    }
}

impl HourMax {
    fn row(r: Resource) -> Option<usize> {
        match r {
            Resource::Cpu => Some(0),
            Resource::Memory => Some(1),
            _ => None,
        }
    }

    /// Adds `r`'s sample at `t` (Unix seconds); resources other than CPU and memory, and
    /// samples an hour or more behind the newest slot, are not kept. Whether the max changed.
    pub fn push(&mut self, r: Resource, t: f64, value: f64) -> bool {
        let Some(row) = Self::row(r) else {
            return false;
        };
        if !t.is_finite() || value.is_nan() {
            return false;
        }
        let idx = ((t * 1000.0).round() as i64).div_euclid(SLOT_MS);
        if self.newest == i64::MIN {
            self.newest = idx;
        }
        if idx > self.newest {
            let gap = (idx - self.newest).min(HOUR_SLOTS as i64);
            for k in 0..gap {
                let slot = (idx - k).rem_euclid(HOUR_SLOTS as i64) as usize;
                self.slots.iter_mut().for_each(|s| s[slot] = f32::NAN);
            }
            self.newest = idx;
        } else if idx <= self.newest - HOUR_SLOTS as i64 {
            return false;
        }
        let cell = &mut self.slots[row][idx.rem_euclid(HOUR_SLOTS as i64) as usize];
        let value = value as f32;
        if cell.is_nan() || value > *cell {
            *cell = value;
            return true;
        }
        false
    }

    /// `r`'s largest sample of the hour, and the share of the hour's slots that have one.
    pub fn max(&self, r: Resource) -> Option<(f32, f32)> {
        let row = Self::row(r)?;
        let filled = self.slots[row].iter().filter(|v| !v.is_nan());
        let n = filled.clone().count();
        let max = filled.copied().reduce(f32::max)?;
        Some((max, n as f32 / HOUR_SLOTS as f32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const M: f64 = 60.0;
    const CPU: Resource = Resource::Cpu;
    const MEM: Resource = Resource::Memory;

    fn rings() -> Rings {
        Rings::new(Duration::from_secs(15 * 60), DEFAULT_CAP)
    }

    #[test]
    fn coverage_is_the_share_of_the_window_its_rows_span() {
        let mut r = rings();
        assert_eq!(r.coverage(Duration::from_secs(300)), 0.0);
        r.push(CPU, 1000.0, 0.1);
        assert_eq!(
            r.coverage(Duration::from_secs(300)),
            0.0,
            "one row spans nothing"
        );
        // Rows every 15 s for 2.5 minutes: 10 rows spanning 135 s, standing for 150 s.
        for i in 1..10 {
            r.push(CPU, 1000.0 + 15.0 * i as f64, 0.1);
        }
        assert!((r.coverage(Duration::from_secs(300)) - 0.5).abs() < 1e-12);
        assert!((r.coverage(Duration::from_secs(900)) - 150.0 / 900.0).abs() < 1e-12);
        assert_eq!(
            r.coverage(Duration::from_secs(60)),
            1.0,
            "at most the whole window"
        );
    }

    #[test]
    fn quantiles_interpolate_between_ranks_as_prometheus_does() {
        let mut r = rings();
        let mut scratch = Vec::new();
        assert_eq!(
            r.quantiles(CPU, Duration::from_secs(900), &mut scratch),
            None
        );
        // 1..=11 in shuffled order: p50 6, p90 10, p95 10.5, p99 10.9.
        for (i, v) in [7.0, 1.0, 11.0, 3.0, 5.0, 2.0, 9.0, 4.0, 10.0, 6.0, 8.0]
            .into_iter()
            .enumerate()
        {
            r.push(CPU, 1000.0 + i as f64 * 10.0, v);
        }
        let q = r
            .quantiles(CPU, Duration::from_secs(900), &mut scratch)
            .unwrap();
        let want = [6.0, 10.0, 10.5, 10.9];
        for (got, want) in q.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{q:?}");
        }
        // The 30 s window holds the last three samples (t = 80, 90, 100 s): 9, 4... sorted 6, 8, 10.
        let q = r
            .quantiles(CPU, Duration::from_secs(30), &mut scratch)
            .unwrap();
        assert_eq!(q[0], 8.0);
    }

    #[test]
    fn the_hour_max_keeps_twelve_five_minute_slots() {
        let mut h = HourMax::default();
        assert_eq!(h.max(CPU), None);
        assert!(!h.push(Resource::DiskIo, 0.0, 1.0), "CPU and memory only");
        let t0 = 1_700_000_100.0; // inside a slot
        assert!(h.push(CPU, t0, 0.9));
        assert!(!h.push(CPU, t0 + 10.0, 0.5), "smaller: the slot keeps 0.9");
        for k in 1..12 {
            h.push(CPU, t0 + 300.0 * k as f64, 0.2);
        }
        assert_eq!(h.max(CPU), Some((0.9, 1.0)));
        // One slot later the first one leaves the hour.
        h.push(CPU, t0 + 300.0 * 12.0, 0.2);
        assert_eq!(h.max(CPU), Some((0.2, 1.0)));
        assert!(
            !h.push(CPU, t0, 1.0),
            "an hour behind the newest slot: dropped"
        );
        // A jump of two hours empties every slot but the new one.
        h.push(CPU, t0 + 7200.0 * 2.0, 0.3);
        assert_eq!(h.max(CPU), Some((0.3, 1.0 / 12.0)));
        assert_eq!(h.max(MEM), None);
    }

    #[test]
    fn a_missing_stat_costs_no_tag() {
        // One node's load holds a `ResourceMap<Stat>` per window: 65,000 nodes at once.
        assert_eq!(
            std::mem::size_of::<Option<Stat>>(),
            std::mem::size_of::<Stat>()
        );
    }

    #[test]
    fn push_tells_whether_the_samples_changed() {
        let mut r = rings();
        assert!(r.push(CPU, 100.0, 0.5), "first sample");
        assert!(!r.push(CPU, 100.0, 0.5), "the same sample again");
        assert!(
            r.push(CPU, 100.0, 0.6),
            "a new value at the same time replaces it"
        );
        assert!(
            r.push(CPU, 110.0, 0.6),
            "a newer sample, equal value: still a sample"
        );
        assert!(
            !r.push(CPU, 100.0, 0.6),
            "an older one equal to the one held"
        );
        assert!(r.push(CPU, 105.0, 0.6), "an older one between two");
        assert_eq!(r.len(), 3);
        assert!(r.push(MEM, 105.0, 0.2), "another resource at a row's time");
        assert_eq!(r.len(), 3, "no new row");
        assert!(
            !r.push(CPU, 110.0 - 900.0, 0.1),
            "a sample a whole horizon behind the newest is dropped"
        );
        let mut small = Rings::new(Duration::from_secs(15 * 60), 2);
        small.push(CPU, 1.0, 1.0);
        small.push(CPU, 2.0, 1.0);
        assert!(
            small.push(CPU, 0.5, 1.0),
            "inserted, then dropped by the cap: changed anyway"
        );
        assert_eq!(small.len(), 2);
    }

    #[test]
    fn avg_and_std_match_hand_computed_values() {
        let mut r = rings();
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, population std 2 (the textbook example).
        for (i, v) in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
            .into_iter()
            .enumerate()
        {
            r.push(CPU, 1000.0 + i as f64 * 10.0, v);
        }
        let s = r.stat(CPU, Duration::from_secs(15 * 60)).unwrap();
        assert_eq!(s.samples.get(), 8);
        assert!((s.avg - 5.0).abs() < 1e-12);
        assert!((s.std - 2.0).abs() < 1e-12);
        assert_eq!(r.stat(MEM, Duration::from_secs(900)), None);
    }

    #[test]
    fn samples_older_than_a_window_leave_it() {
        let mut r = rings();
        // One sample a minute for 20 minutes: values 0..=19 at t = 0..=19 min.
        for i in 0..=19 {
            r.push(CPU, i as f64 * M, i as f64);
        }
        // Newest at 19 min. 5m window: t > 14 min -> 15..=19, mean 17, std sqrt(2).
        let s5 = r.stat(CPU, Duration::from_secs(300)).unwrap();
        assert_eq!(s5.samples.get(), 5);
        assert!((s5.avg - 17.0).abs() < 1e-12);
        assert!((s5.std - 2f64.sqrt()).abs() < 1e-12);
        // 10m: 10..=19, mean 14.5, std sqrt(8.25).
        let s10 = r.stat(CPU, Duration::from_secs(600)).unwrap();
        assert_eq!(s10.samples.get(), 10);
        assert!((s10.avg - 14.5).abs() < 1e-12);
        assert!((s10.std - 8.25f64.sqrt()).abs() < 1e-12);
        // 15m: 5..=19 (the rows 0..=4 were dropped: at most 15 minutes behind the newest).
        let s15 = r.stat(CPU, Duration::from_secs(900)).unwrap();
        assert_eq!(s15.samples.get(), 15);
        assert!((s15.avg - 12.0).abs() < 1e-12);
        // population variance of 15 consecutive integers = (15^2 - 1) / 12 = 18.666...
        assert!((s15.std - (224.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert_eq!(r.len(), 15);
    }

    #[test]
    fn a_constant_series_has_exactly_its_value_and_no_spread() {
        let mut r = rings();
        for i in 0..15 {
            r.push(CPU, i as f64 * M, 0.35);
        }
        let s = r.stat(CPU, Duration::from_secs(900)).unwrap();
        assert_eq!((s.avg, s.std), (0.35, 0.0));
    }

    #[test]
    fn single_sample_has_zero_std() {
        let mut r = rings();
        r.push(CPU, 5.0, 0.42);
        let s = r.stat(CPU, Duration::from_secs(300)).unwrap();
        assert_eq!((s.avg, s.std, s.samples.get()), (0.42, 0.0, 1));
    }

    #[test]
    fn empty_rings_have_no_stat() {
        assert_eq!(rings().stat(CPU, Duration::from_secs(300)), None);
        assert_eq!(rings().newest_time(), None);
    }

    #[test]
    fn out_of_order_and_duplicate_samples_keep_time_order() {
        let mut r = rings();
        r.push(CPU, 100.0, 1.0);
        r.push(CPU, 300.0, 3.0);
        r.push(CPU, 200.0, 2.0); // late arrival
        r.push(CPU, 300.0, 4.0); // same time: replaces
        assert_eq!(r.len(), 3);
        assert_eq!(r.newest_time(), Some(300.0));
        let s = r.stat(CPU, Duration::from_secs(150)).unwrap(); // t > 150: 200 and 300
        assert_eq!(s.samples.get(), 2);
        assert!((s.avg - 3.0).abs() < 1e-12);
        // Older than the first row (the base moves) and between rows, to the millisecond.
        r.push(CPU, 99.999, 5.0);
        r.push(CPU, 100.001, 6.0);
        assert_eq!(r.len(), 5);
        assert_eq!(
            r.stat(CPU, Duration::from_secs(900)).unwrap().samples.get(),
            5
        );
        let s = r.stat(CPU, Duration::from_millis(200_001)).unwrap(); // t > 99.999
        assert_eq!(s.samples.get(), 4, "{s:?}");
    }

    #[test]
    fn cap_bounds_memory() {
        let mut r = Rings::new(Duration::from_secs(900), 10);
        for i in 0..100 {
            r.push(CPU, i as f64, 1.0);
            r.push(MEM, i as f64, 2.0);
        }
        assert_eq!(r.len(), 10);
        assert_eq!(
            r.stat(MEM, Duration::from_secs(900)).unwrap().samples.get(),
            10
        );
    }

    #[test]
    fn each_resource_has_its_own_newest_sample_and_window() {
        let mut r = rings();
        for i in 0..10 {
            r.push(CPU, i as f64 * M, i as f64);
        }
        // Memory only for the first five minutes.
        for i in 0..5 {
            r.push(MEM, i as f64 * M, 10.0 + i as f64);
        }
        // Memory's 2-minute window ends at its own newest sample (4 min): 3 and 4 min.
        let m = r.stat(MEM, Duration::from_secs(120)).unwrap();
        assert_eq!((m.samples.get(), m.avg), (2, 13.5));
        let c = r.stat(CPU, Duration::from_secs(120)).unwrap();
        assert_eq!((c.samples.get(), c.avg), (2, 8.5));
        // A resource that stopped leaves with the rows, 15 minutes behind the newest.
        r.push(CPU, 20.0 * M, 0.0);
        assert_eq!(r.stat(MEM, Duration::from_secs(900)), None);
        assert!(r.stat(CPU, Duration::from_secs(900)).is_some());
    }

    #[test]
    fn a_jump_forward_of_months_keeps_the_newest_samples() {
        let mut r = rings();
        let t0 = 1_700_000_000.0;
        r.push(CPU, t0, 1.0);
        r.push(CPU, t0 + 10.0, 2.0);
        // 100 days later (past a u32 of milliseconds): the old rows are behind the horizon.
        let t1 = t0 + 100.0 * 86_400.0;
        assert!(r.push(CPU, t1, 3.0));
        assert_eq!(r.len(), 1);
        r.push(CPU, t1 + 15.0, 5.0);
        assert_eq!(r.newest_time(), Some(t1 + 15.0));
        let s = r.stat(CPU, Duration::from_secs(900)).unwrap();
        assert_eq!((s.samples.get(), s.avg), (2, 4.0));
    }

    #[test]
    fn a_node_of_two_resources_holds_twenty_bytes_a_sample_time() {
        let mut r = rings();
        for i in 0..60 {
            r.push(CPU, 1_700_000_000.0 + 15.0 * i as f64, 0.5);
            r.push(MEM, 1_700_000_000.0 + 15.0 * i as f64, 0.25);
        }
        assert_eq!(r.len(), 60);
        let heap = r.times.capacity() * 4 + r.values.capacity() * 8;
        // Capacities round up to a power of two: 64 times, 128 values.
        assert!(heap <= 64 * 4 + 128 * 8, "{heap} B");
        assert!(std::mem::size_of::<Rings>() <= 88);
    }

    /// The rings of before (one `(time, value)` ring per resource), as the reference.
    #[derive(Default)]
    struct Reference(std::collections::BTreeMap<u8, Vec<(i64, f64)>>);

    impl Reference {
        fn push(&mut self, r: u8, ms: i64, v: f64) {
            let ring = self.0.entry(r).or_default();
            match ring.iter_mut().find(|(t, _)| *t == ms) {
                Some(s) => s.1 = v,
                None => {
                    ring.push((ms, v));
                    ring.sort_by_key(|s| s.0);
                }
            }
        }
        fn stat(&self, r: u8, newest: i64, horizon: i64, window: i64) -> Option<(u32, f64, f64)> {
            let ring = self.0.get(&r)?;
            let alive: Vec<_> = ring.iter().filter(|s| s.0 > newest - horizon).collect();
            let end = alive.last()?.0;
            let xs: Vec<f64> = alive
                .iter()
                .filter(|s| s.0 > end - window)
                .map(|s| s.1)
                .collect();
            let n = xs.len() as f64;
            let shift = xs[0];
            let mo = xs.iter().map(|v| v - shift).sum::<f64>() / n;
            let var = xs
                .iter()
                .map(|v| (v - shift - mo) * (v - shift - mo))
                .sum::<f64>()
                / n;
            Some((xs.len() as u32, shift + mo, var.max(0.0).sqrt()))
        }
    }

    proptest! {
        /// Any order of samples of two resources gives, for every window, the statistics of
        /// one time-ordered ring per resource holding the samples less than a horizon behind
        /// the newest of both (the same numbers, bit for bit).
        #[test]
        fn stats_are_those_of_a_ring_per_resource(
            pushes in proptest::collection::vec(
                (
                    0u8..2,
                    // Anywhere, or on a 15 s grid (shared rows, same-time replacements).
                    prop_oneof![0i64..2_000_000, (0i64..120).prop_map(|k| k * 15_000)],
                    0u32..1000,
                ),
                1..120,
            ),
            window_s in 1u64..1200,
        ) {
            let horizon = 900_000;
            let mut r = rings();
            let mut reference = Reference::default();
            let mut newest = i64::MIN / 2;
            for (res, ms, v) in pushes {
                let t = 1_700_000_000_000 + ms;
                if t <= newest - horizon {
                    continue; // dropped by both
                }
                newest = newest.max(t);
                let value = f64::from(v) / 7.0;
                r.push(Resource::ALL[res as usize], t as f64 / 1000.0, value);
                reference.push(res, t, value);
            }
            for res in 0..2u8 {
                let got = r
                    .stat(Resource::ALL[res as usize], Duration::from_secs(window_s))
                    .map(|s| (s.samples.get(), s.avg, s.std));
                let want = reference.stat(res, newest, horizon, window_s as i64 * 1000);
                prop_assert_eq!(got, want);
            }
        }
    }
}
