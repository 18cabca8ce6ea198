//! The benches' SVG charts (`support::plot`): every point lands inside the frame where its axes
//! put it, the document is well formed, and text from the figures is escaped.

use proptest::prelude::*;
use support::plot::{Chart, Series, cdf};

/// The numbers of every `<polyline points="…">` but the frame (the first one drawn is the axes).
fn lines(svg: &str) -> Vec<Vec<(f64, f64)>> {
    svg.lines()
        .filter(|l| l.starts_with("<polyline") && l.contains("<title>"))
        .map(|l| {
            let start = l.find("points=\"").expect("points") + 8;
            let end = start + l[start..].find('"').expect("closing quote");
            l[start..end]
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').expect("x,y");
                    (x.parse().expect("x"), y.parse().expect("y"))
                })
                .collect()
        })
        .collect()
}

/// Every element opened is closed, in order.
fn well_formed(svg: &str) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        let end = rest[i..].find('>').ok_or("a tag never closed")? + i;
        let tag = &rest[i + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(o) if o == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().unwrap_or("").to_string());
        }
        rest = &rest[end + 1..];
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("never closed: {open:?}"))
    }
}

#[test]
fn a_chart_puts_its_points_on_round_axes_in_order() {
    let chart = Chart::new("CPU <under> churn & idle", "changes/s", "ms/s")
        .series(Series::new(
            "kube-prober",
            vec![(0.0, 10.0), (50.0, 40.0), (100.0, 70.0)],
        ))
        .series(Series::new(
            "kube-state-metrics",
            vec![(0.0, 20.0), (100.0, 140.0)],
        ))
        .note("measured on abc1234");
    let svg = chart.svg();
    well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert!(svg.contains("CPU &lt;under&gt; churn &amp; idle"), "{svg}");
    assert!(svg.contains("measured on abc1234"), "{svg}");
    // y from 0 to 150 in steps of 50 (140 / 5 rounds up to 50), x from 0 to 100 in steps of 20.
    for tick in [">0<", ">50<", ">150<", ">20<", ">100<"] {
        assert!(svg.contains(tick), "no tick {tick}: {svg}");
    }
    let l = lines(&svg);
    assert_eq!(l.len(), 2, "{svg}");
    let (kp, ksm) = (&l[0], &l[1]);
    assert_eq!(kp.len(), 3);
    // The same x on both lines; a larger y is higher (a smaller pixel row).
    assert_eq!(kp[0].0, ksm[0].0);
    assert_eq!(kp[2].0, ksm[1].0);
    assert!(kp[0].1 > kp[1].1 && kp[1].1 > kp[2].1, "{kp:?}");
    assert!(ksm[1].1 < kp[2].1, "140 above 70: {l:?}");
    // Equal steps in x and y are equal steps in pixels.
    assert!(
        ((kp[1].0 - kp[0].0) - (kp[2].0 - kp[1].0)).abs() < 0.2,
        "{kp:?}"
    );
    assert!(
        ((kp[0].1 - kp[1].1) - (kp[1].1 - kp[2].1)).abs() < 0.2,
        "{kp:?}"
    );
    // Both series in the legend.
    assert!(svg.contains(">kube-prober<") && svg.contains(">kube-state-metrics<"));
}

#[test]
fn a_chart_without_a_finite_point_says_so() {
    let chart = Chart::new("empty", "x", "y").series(Series::new(
        "nothing",
        vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)],
    ));
    let svg = chart.svg();
    well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert!(svg.contains(">no data<"), "{svg}");
    assert!(lines(&svg).is_empty());
}

#[test]
fn cdf_rises_to_one() {
    assert_eq!(
        cdf(&[1.0, 2.0, 2.0, 4.0]),
        vec![(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (4.0, 1.0)]
    );
    assert!(cdf(&[]).is_empty());
}

proptest! {
    #[test]
    fn every_finite_point_lands_inside_the_frame(
        pts in prop::collection::vec(
            (prop_oneof![-1e9..1e9f64, Just(0.0), Just(f64::NAN)], -1e7..1e9f64), 1..60),
        split in 0usize..60,
    ) {
        let cut = split.min(pts.len());
        let chart = Chart::new("p", "x", "y")
            .series(Series::new("a", pts[..cut].to_vec()))
            .series(Series::new("b", pts[cut..].to_vec()));
        let svg = chart.svg();
        prop_assert!(well_formed(&svg).is_ok(), "{}", svg);
        let finite = pts.iter().filter(|(x, y)| x.is_finite() && y.is_finite()).count();
        let drawn: Vec<(f64, f64)> = lines(&svg).into_iter().flatten().collect();
        prop_assert_eq!(drawn.len(), finite);
        for (x, y) in drawn {
            // The frame: 78..696 across, 48..356 down (support::plot's margins).
            prop_assert!((77.9..=696.1).contains(&x), "x {} outside", x);
            prop_assert!((47.9..=356.1).contains(&y), "y {} outside", y);
        }
    }
}
