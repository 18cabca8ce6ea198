//! Prometheus exposition of a [`Snapshot`], in text format 0.0.4 and OpenMetrics 1.0.
//!
//! We render from the snapshot ourselves instead of through prometheus-client's `Registry`:
//! that crate encodes OpenMetrics only (Prometheus text 0.0.4 is still what most scrapers ask
//! for by default), and its model of registered, long-lived metric objects is the opposite of
//! "series die with their objects": here every tick renders every family afresh from one
//! immutable snapshot, and the bytes are served as they are on each scrape.
//!
//! The body is split in two: `render` (all families but the snapshot age, made at tick time)
//! and `render_tail` (the snapshot age, which changes each second, plus `# EOF` for
//! OpenMetrics), made on each scrape.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::names::{self, Family, Kind};
use super::series::{self, Labels};
use crate::model::Snapshot;

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// OpenMetrics when the `Accept` header lists it with a non-zero q, else text.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        for item in accept.split(',') {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            if !media.eq_ignore_ascii_case("application/openmetrics-text") {
                continue;
            }
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if !refused {
                return Format::OpenMetrics;
            }
        }
        Format::Text
    }
}

struct Writer {
    out: String,
    format: Format,
}

impl Writer {
    /// `# HELP`, `# TYPE` and (OpenMetrics) `# UNIT` of a family.
    fn header(&mut self, family: &Family) {
        let sample = family.sample_name();
        let meta_name = match self.format {
            Format::OpenMetrics => family.name,
            Format::Text => sample.as_str(),
        };
        let kind = match family.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(
            self.out,
            "# HELP {meta_name} {}",
            escape_help(family.help, self.format)
        );
        let _ = writeln!(self.out, "# TYPE {meta_name} {kind}");
        if let (Format::OpenMetrics, Some(unit)) = (self.format, family.unit) {
            let _ = writeln!(self.out, "# UNIT {} {unit}", family.name);
        }
    }

    /// A gauge or counter family; nothing at all when it has no rows.
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        if rows.is_empty() {
            return;
        }
        self.header(family);
        let sample = family.sample_name();
        for (labels, value) in rows {
            self.sample(&sample, labels, *value);
        }
    }

    /// A histogram family: per row the cumulative bucket counts for `bounds`, the sum and the
    /// count (which is also the `+Inf` bucket).
    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        if rows.is_empty() {
            return;
        }
        self.header(family);
        let (bucket, sum, count) = (
            format!("{}_bucket", family.name),
            format!("{}_sum", family.name),
            format!("{}_count", family.name),
        );
        let mut le = String::new();
        for (labels, buckets, total, n) in rows {
            for (i, bound) in bounds.iter().map(Some).chain([None]).enumerate() {
                le.clear();
                match bound {
                    Some(b) => push_value(&mut le, *b),
                    None => le.push_str("+Inf"),
                }
                let v = bound.map_or(*n, |_| buckets.get(i).copied().unwrap_or(0));
                let mut l = labels.clone();
                l.push(("le", le.as_str()));
                self.sample(&bucket, &l, v as f64);
            }
            self.sample(&sum, labels, *total);
            self.sample(&count, labels, *n as f64);
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label_value(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        push_value(&mut self.out, value);
        self.out.push('\n');
    }
}

impl series::Visitor for Writer {
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        Writer::family(self, family, rows);
    }
    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        Writer::histogram(self, family, bounds, rows);
    }
}

fn escape_help(help: &str, format: Format) -> String {
    let mut s = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '"' if format == Format::OpenMetrics => s.push_str("\\\""),
            c => s.push(c),
        }
    }
    s
}

fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Every family but the snapshot age, in `names::ALL` order. Made once per tick.
pub fn render(snap: &Snapshot, format: Format) -> String {
    // Sized from the previous body of this format (plus 1/16 for growth): one allocation of
    // about the right size instead of doubling from a guess, which at 5,000 nodes held a 64 MiB
    // buffer for a 34 MB body while the 32 MiB one it grew from was still alive.
    let hint = &LAST_LEN[format as usize];
    let previous = hint.load(std::sync::atomic::Ordering::Relaxed);
    let capacity = if previous > 0 {
        previous + previous / 16
    } else {
        4096 + snap.nodes.len() * 2048
    };
    let mut w = Writer {
        out: String::with_capacity(capacity),
        format,
    };
    series::visit(
        snap,
        &mut super::select::Filter::new(&snap.selection, &mut w),
    );
    hint.store(w.out.len(), std::sync::atomic::Ordering::Relaxed);
    w.out
}

/// Length of the newest body per [`Format`] (a capacity hint only).
static LAST_LEN: [std::sync::atomic::AtomicUsize; 2] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// The part of the body that changes on every scrape: the snapshot's age, and `# EOF` for
/// OpenMetrics.
pub fn render_tail(snap: &Snapshot, now: SystemTime, format: Format) -> String {
    let age = now
        .duration_since(snap.generated_at)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut w = Writer {
        out: String::with_capacity(256),
        format,
    };
    if super::select::family_allowed(&snap.selection, &names::SNAPSHOT_AGE) {
        w.family(&names::SNAPSHOT_AGE, &[(vec![], age)]);
    }
    if format == Format::OpenMetrics {
        w.out.push_str("# EOF\n");
    }
    w.out
}

/// Families kept outside the snapshot (the server's own counters, [`names::SERVER`]), rendered
/// on each scrape; placed before [`render_tail`], which ends an OpenMetrics body.
pub fn render_families(
    families: &[(&'static Family, Vec<(Labels<'_>, f64)>)],
    format: Format,
) -> String {
    let mut w = Writer {
        out: String::with_capacity(1024),
        format,
    };
    for (family, rows) in families {
        w.family(family, rows);
    }
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_openmetrics_only_when_asked() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0, text/plain")),
            Format::Text
        );
    }

    #[test]
    fn escapes_label_values_and_help() {
        let mut s = String::new();
        escape_label_value(&mut s, "a\"b\\c\nd");
        assert_eq!(s, "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x \"y\"\n", Format::Text), "x \"y\"\\n");
        assert_eq!(escape_help("x \"y\"", Format::OpenMetrics), "x \\\"y\\\"");
    }

    #[test]
    fn values_use_prometheus_spellings() {
        let mut s = String::new();
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.25, 3.0, 1e-7] {
            push_value(&mut s, v);
            s.push(' ');
        }
        assert_eq!(s, "NaN +Inf -Inf 0.25 3 0.0000001 ");
    }

    #[test]
    fn counters_are_named_per_format() {
        let snap = Snapshot::empty(SystemTime::UNIX_EPOCH);
        let text = render(&snap, Format::Text);
        assert!(
            text.contains("# TYPE kube_prober_ticks_total counter\nkube_prober_ticks_total 0\n")
        );
        let om = render(&snap, Format::OpenMetrics);
        assert!(om.contains("# TYPE kube_prober_ticks counter\nkube_prober_ticks_total 0\n"));
        let tail = render_tail(&snap, SystemTime::UNIX_EPOCH, Format::OpenMetrics);
        assert!(
            tail.ends_with("kube_prober_snapshot_age_seconds 0\n# EOF\n"),
            "{tail}"
        );
        assert!(tail.contains("# UNIT kube_prober_snapshot_age_seconds seconds\n"));
    }
}
