//! A time-ordered ring of samples of one quantity, giving AVG and STD over trailing windows.

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::Stat;

/// Samples older than `horizon` behind the newest one are dropped, and at most `cap` are kept.
#[derive(Debug, Clone)]
pub struct Ring {
    samples: VecDeque<(f64, f64)>,
    horizon: f64,
    cap: usize,
}

/// The most samples one ring keeps: 15 minutes at one sample every 0.5 s.
pub const DEFAULT_CAP: usize = 1800;

impl Ring {
    pub fn new(horizon: Duration, cap: usize) -> Self {
        Ring {
            samples: VecDeque::new(),
            horizon: horizon.as_secs_f64(),
            cap: cap.max(1),
        }
    }

    /// Adds a sample at `t` (Unix seconds). A sample at the same time as an existing one replaces
    /// it; an older one is put in its place in time order. Returns whether the ring changed (a
    /// sample at the time of one already held with the same value leaves it as it was).
    pub fn push(&mut self, t: f64, value: f64) -> bool {
        let same = |&(_, v): &(f64, f64)| v.to_bits() == value.to_bits();
        let mut changed = true;
        match self.samples.back() {
            Some(&(last, _)) if t < last => {
                let pos = self.samples.partition_point(|&(ts, _)| ts < t);
                match self.samples.get_mut(pos) {
                    Some(s) if s.0 == t => {
                        changed = !same(s);
                        *s = (t, value);
                    }
                    _ => self.samples.insert(pos, (t, value)),
                }
            }
            Some(&(last, _)) if t == last => {
                if let Some(back) = self.samples.back_mut() {
                    changed = !same(back);
                    *back = (t, value);
                }
            }
            _ => self.samples.push_back((t, value)),
        }
        let newest = self.newest_time().unwrap_or(t);
        while self
            .samples
            .front()
            .is_some_and(|&(ts, _)| ts <= newest - self.horizon)
        {
            self.samples.pop_front();
            changed = true;
        }
        while self.samples.len() > self.cap {
            self.samples.pop_front();
            changed = true;
        }
        changed
    }

    pub fn newest_time(&self) -> Option<f64> {
        self.samples.back().map(|&(t, _)| t)
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Mean and population standard deviation of the samples newer than `end - window`, where
    /// `end` is the newest sample's time. `None` when the ring is empty.
    pub fn stat(&self, window: Duration) -> Option<Stat> {
        let end = self.newest_time()?;
        let start = end - window.as_secs_f64();
        let in_window = || self.samples.iter().filter(move |&&(t, _)| t > start);
        let n = in_window().count();
        if n == 0 {
            return None;
        }
        let nf = n as f64;
        // Shifted by the first value: a constant series gives exactly its value and 0 spread,
        // and large values near each other keep their precision.
        let shift = in_window().next().map(|&(_, v)| v).unwrap_or(0.0);
        let mean_offset = in_window().map(|&(_, v)| v - shift).sum::<f64>() / nf;
        let avg = shift + mean_offset;
        let var = in_window()
            .map(|&(_, v)| {
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

#[cfg(test)]
mod tests {
    use super::*;

    const M: f64 = 60.0;

    fn ring() -> Ring {
        Ring::new(Duration::from_secs(15 * 60), DEFAULT_CAP)
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
    fn push_tells_whether_the_ring_changed() {
        let mut r = ring();
        assert!(r.push(100.0, 0.5), "first sample");
        assert!(!r.push(100.0, 0.5), "the same sample again");
        assert!(
            r.push(100.0, 0.6),
            "a new value at the same time replaces it"
        );
        assert!(
            r.push(110.0, 0.6),
            "a newer sample, equal value: still a sample"
        );
        assert!(!r.push(100.0, 0.6), "an older one equal to the one held");
        assert!(r.push(105.0, 0.6), "an older one between two");
        assert_eq!(r.len(), 3);
        let mut small = Ring::new(Duration::from_secs(15 * 60), 2);
        small.push(1.0, 1.0);
        small.push(2.0, 1.0);
        assert!(
            small.push(0.5, 1.0),
            "inserted, then dropped by the cap: changed anyway"
        );
    }

    #[test]
    fn avg_and_std_match_hand_computed_values() {
        let mut r = ring();
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, population std 2 (the textbook example).
        for (i, v) in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
            .into_iter()
            .enumerate()
        {
            r.push(1000.0 + i as f64 * 10.0, v);
        }
        let s = r.stat(Duration::from_secs(15 * 60)).unwrap();
        assert_eq!(s.samples.get(), 8);
        assert!((s.avg - 5.0).abs() < 1e-12);
        assert!((s.std - 2.0).abs() < 1e-12);
    }

    #[test]
    fn samples_older_than_a_window_leave_it() {
        let mut r = ring();
        // One sample a minute for 20 minutes: values 0..=19 at t = 0..=19 min.
        for i in 0..=19 {
            r.push(i as f64 * M, i as f64);
        }
        // Newest at 19 min. 5m window: t > 14 min -> 15..=19, mean 17, std sqrt(2).
        let s5 = r.stat(Duration::from_secs(300)).unwrap();
        assert_eq!(s5.samples.get(), 5);
        assert!((s5.avg - 17.0).abs() < 1e-12);
        assert!((s5.std - 2f64.sqrt()).abs() < 1e-12);
        // 10m: 10..=19, mean 14.5, std sqrt(8.25).
        let s10 = r.stat(Duration::from_secs(600)).unwrap();
        assert_eq!(s10.samples.get(), 10);
        assert!((s10.avg - 14.5).abs() < 1e-12);
        assert!((s10.std - 8.25f64.sqrt()).abs() < 1e-12);
        // 15m: 5..=19 (the ring itself dropped 0..=4: at most 15 minutes behind the newest).
        let s15 = r.stat(Duration::from_secs(900)).unwrap();
        assert_eq!(s15.samples.get(), 15);
        assert!((s15.avg - 12.0).abs() < 1e-12);
        // population variance of 15 consecutive integers = (15^2 - 1) / 12 = 18.666...
        assert!((s15.std - (224.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert_eq!(r.len(), 15);
    }

    #[test]
    fn a_constant_series_has_exactly_its_value_and_no_spread() {
        let mut r = ring();
        for i in 0..15 {
            r.push(i as f64 * M, 0.35);
        }
        let s = r.stat(Duration::from_secs(900)).unwrap();
        assert_eq!((s.avg, s.std), (0.35, 0.0));
    }

    #[test]
    fn single_sample_has_zero_std() {
        let mut r = ring();
        r.push(5.0, 0.42);
        let s = r.stat(Duration::from_secs(300)).unwrap();
        assert_eq!((s.avg, s.std, s.samples.get()), (0.42, 0.0, 1));
    }

    #[test]
    fn empty_ring_has_no_stat() {
        assert_eq!(ring().stat(Duration::from_secs(300)), None);
    }

    #[test]
    fn out_of_order_and_duplicate_samples_keep_time_order() {
        let mut r = ring();
        r.push(100.0, 1.0);
        r.push(300.0, 3.0);
        r.push(200.0, 2.0); // late arrival
        r.push(300.0, 4.0); // same time: replaces
        assert_eq!(r.len(), 3);
        assert_eq!(r.newest_time(), Some(300.0));
        let s = r.stat(Duration::from_secs(150)).unwrap(); // t > 150: 200 and 300
        assert_eq!(s.samples.get(), 2);
        assert!((s.avg - 3.0).abs() < 1e-12);
    }

    #[test]
    fn cap_bounds_memory() {
        let mut r = Ring::new(Duration::from_secs(900), 10);
        for i in 0..100 {
            r.push(i as f64, 1.0);
        }
        assert_eq!(r.len(), 10);
    }
}
