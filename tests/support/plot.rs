//! Line charts as SVG, drawn by the benches from the figures they just measured
//! (docs/benchmarks.md, docs/trimaran.md and docs/reliability.md show them). No dependency: a
//! chart is a title, two axis labels and named series of (x, y) points; the axes get round
//! ticks, each series a colour of the Okabe–Ito palette (told apart without colour vision too,
//! by its marker and dash), and a legend.
//!
//! [`write`] puts a chart in the folder the bench was given (`PLOTS_DIR`); [`plots_dir`] reads
//! it. Points that are not finite are left out, and a chart with no point says so in its
//! middle rather than drawing empty axes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 64.0;
/// Okabe–Ito: blue, vermillion, bluish green, reddish purple, orange, sky blue.
const COLOURS: [&str; 6] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
];
const DASHES: [&str; 6] = ["", "6 3", "2 3", "8 3 2 3", "4 4", "1 2"];

/// One named line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// A line chart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// A line under the x axis label: the command and commit the figures come from.
    pub note: String,
    /// Start the y axis at the data's least value rather than at 0.
    pub y_from_data: bool,
}

impl Chart {
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Chart {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            ..Chart::default()
        }
    }

    pub fn series(mut self, s: Series) -> Chart {
        self.series.push(s);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Chart {
        self.note = note.into();
        self
    }

    /// Every finite point of every series.
    fn finite(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    }

    /// The chart as a standalone SVG document.
    pub fn svg(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        );
        text(&mut out, WIDTH / 2.0, 24.0, "middle", 15.0, &self.title);
        let pts: Vec<(f64, f64)> = self.finite().collect();
        if pts.is_empty() {
            text(
                &mut out,
                WIDTH / 2.0,
                HEIGHT / 2.0,
                "middle",
                13.0,
                "no data",
            );
            out.push_str("</svg>\n");
            return out;
        }
        let xs = Axis::new(pts.iter().map(|p| p.0), true);
        let ys = Axis::new(pts.iter().map(|p| p.1), self.y_from_data);
        let frame = Frame { x: xs, y: ys };
        frame.draw_axes(&mut out, &self.x_label, &self.y_label, &self.note);
        for (i, s) in self.series.iter().enumerate() {
            frame.draw_series(&mut out, s, i);
        }
        self.legend(&mut out);
        out.push_str("</svg>\n");
        out
    }

    fn legend(&self, out: &mut String) {
        let x = LEFT + 12.0;
        for (i, s) in self.series.iter().enumerate() {
            let y = TOP + 14.0 + 16.0 * i as f64;
            let (colour, dash) = style(i);
            let _ = writeln!(
                out,
                "<line x1=\"{x}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{colour}\" \
                 stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>",
                x + 22.0
            );
            marker(out, x + 11.0, y, i, colour);
            text(out, x + 28.0, y + 4.0, "start", 12.0, &s.name);
        }
    }
}

/// A linear axis over `[lo, hi]` with round ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Axis {
    lo: f64,
    hi: f64,
    step: f64,
}

impl Axis {
    /// From the values; from 0 unless `from_data` (or a value is negative).
    fn new(values: impl Iterator<Item = f64>, from_data: bool) -> Axis {
        let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        if !from_data {
            lo = lo.min(0.0);
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            // One value: a unit around it.
            let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
            lo -= pad;
            hi += pad;
            if !from_data && lo < 0.0 && hi > 0.0 && hi - 2.0 * pad >= 0.0 {
                lo = 0.0;
            }
        }
        let step = nice_step((hi - lo) / 5.0);
        Axis {
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            step,
        }
    }

    fn ticks(&self) -> Vec<f64> {
        let n = ((self.hi - self.lo) / self.step).round() as usize;
        (0..=n).map(|i| self.lo + self.step * i as f64).collect()
    }

    /// Where `v` falls between `from` and `to` (pixels).
    fn map(&self, v: f64, from: f64, to: f64) -> f64 {
        from + (v - self.lo) / (self.hi - self.lo) * (to - from)
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = if raw > 0.0 && raw.is_finite() {
        raw
    } else {
        1.0
    };
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

struct Frame {
    x: Axis,
    y: Axis,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        self.x.map(x, LEFT, WIDTH - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        self.y.map(y, HEIGHT - BOTTOM, TOP)
    }

    fn draw_axes(&self, out: &mut String, x_label: &str, y_label: &str, note: &str) {
        let (l, r, t, b) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
        for v in self.y.ticks() {
            let y = self.py(v);
            let _ = writeln!(
                out,
                "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>"
            );
            text(
                out,
                l - 6.0,
                y + 4.0,
                "end",
                11.0,
                &tick_label(v, self.y.step),
            );
        }
        for v in self.x.ticks() {
            let x = self.px(v);
            let _ = writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{b}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#333\"/>",
                b + 4.0
            );
            text(
                out,
                x,
                b + 18.0,
                "middle",
                11.0,
                &tick_label(v, self.x.step),
            );
        }
        let _ = writeln!(
            out,
            "<polyline points=\"{l},{t} {l},{b} {r},{b}\" fill=\"none\" stroke=\"#333\"/>"
        );
        text(out, (l + r) / 2.0, b + 38.0, "middle", 12.0, x_label);
        if !note.is_empty() {
            text(out, (l + r) / 2.0, b + 56.0, "middle", 10.0, note);
        }
        let cy = (t + b) / 2.0;
        let _ = writeln!(
            out,
            "<text x=\"18\" y=\"{cy}\" text-anchor=\"middle\" font-size=\"12\" \
             transform=\"rotate(-90 18 {cy})\">{}</text>",
            escape(y_label)
        );
    }

    fn draw_series(&self, out: &mut String, s: &Series, i: usize) {
        let (colour, dash) = style(i);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| (self.px(x), self.py(y)))
            .collect();
        let line: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" \
             stroke-dasharray=\"{dash}\"><title>{}</title></polyline>",
            line.join(" "),
            escape(&s.name)
        );
        // Markers where the points are few enough to be told apart.
        if pts.len() <= 40 {
            for (x, y) in pts {
                marker(out, x, y, i, colour);
            }
        }
    }
}

fn style(i: usize) -> (&'static str, &'static str) {
    (COLOURS[i % COLOURS.len()], DASHES[i % DASHES.len()])
}

/// A circle, square, triangle or diamond, by series.
fn marker(out: &mut String, x: f64, y: f64, i: usize, colour: &str) {
    let _ = match i % 4 {
        0 => writeln!(
            out,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\"/>"
        ),
        1 => writeln!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"{colour}\"/>",
            x - 3.5,
            y - 3.5
        ),
        2 => writeln!(
            out,
            "<polygon points=\"{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"{colour}\"/>",
            y - 4.5,
            x - 4.0,
            y + 3.5,
            x + 4.0,
            y + 3.5
        ),
        _ => writeln!(
            out,
            "<polygon points=\"{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}\" \
             fill=\"{colour}\"/>",
            y - 4.5,
            x + 4.5,
            y + 4.5,
            x - 4.5
        ),
    };
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    let s = format!("{v:.decimals$}");
    // Thousands apart, as the docs write them.
    match s.split_once('.') {
        None => group(&s),
        Some((int, frac)) => format!("{}.{frac}", group(int)),
    }
}

fn group(int: &str) -> String {
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    if digits.len() <= 4 {
        return int.to_string();
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, size: f64, s: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\" font-size=\"{size}\">{}</text>",
        escape(s)
    );
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The folder the benches write their plots to: `PLOTS_DIR`, or `target/plots` under the
/// current folder.
pub fn plots_dir() -> PathBuf {
    std::env::var_os("PLOTS_DIR").map_or_else(|| PathBuf::from("target/plots"), PathBuf::from)
}

/// Writes `chart` as `dir/name.svg` (the folder made if missing); returns the path. A failure
/// is reported on stderr and returns `None`: a plot never fails a bench's figures.
pub fn write(dir: &Path, name: &str, chart: &Chart) -> Option<PathBuf> {
    let path = dir.join(format!("{name}.svg"));
    let done = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, chart.svg()));
    match done {
        Ok(()) => {
            eprintln!("plot: {}", path.display());
            Some(path)
        }
        Err(e) => {
            eprintln!("plot: writing {}: {e}", path.display());
            None
        }
    }
}

/// The fraction of `sorted` at or below each value: the points of a CDF line.
pub fn cdf(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len() as f64;
    sorted
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, (i + 1) as f64 / n))
        .collect()
}
