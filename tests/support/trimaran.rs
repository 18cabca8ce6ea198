//! Trimaran's three load-aware scores (scheduler-plugins v0.34.7, `pkg/trimaran`), written from
//! their documented formulas over a `/watcher` node's metrics, for the fast unit tests
//! (tests/standins/trimaran.rs) and for the real scheduler's decisions (tests/real/trimaran.rs), which
//! check these functions against the scores the real plugins log.
//!
//! Every score is the plugin's `int64(math.Round(..))`; Rust's `f64::round` also rounds half
//! away from zero. A node without metrics scores 0 (MinNodeScore) in every plugin.
#![allow(dead_code)]

use kube_prober::watcher::Metric;

/// Arguments of the three plugins as the test profiles set them.
#[derive(Debug, Clone, Copy)]
pub struct Args {
    /// TargetLoadPacking `targetUtilization` (percent).
    pub target_utilization: f64,
    /// LoadVariationRiskBalancing `safeVarianceMargin` and `safeVarianceSensitivity`.
    pub margin: f64,
    pub sensitivity: f64,
    /// LowRiskOverCommitment `smoothingWindowSize` and the CPU and memory `riskLimitWeights`.
    pub smoothing_window: f64,
    pub risk_limit_weight: f64,
}

impl Default for Args {
    /// The plugins' defaults.
    fn default() -> Self {
        Args {
            target_utilization: 40.0,
            margin: 1.0,
            sensitivity: 1.0,
            smoothing_window: 5.0,
            risk_limit_weight: 0.5,
        }
    }
}

/// What the plugins read of a node and of the pod being scheduled besides the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodePod {
    /// The node's CPU capacity and allocatable (millicores), memory allocatable (bytes).
    pub cpu_capacity_millis: f64,
    pub cpu_allocatable_millis: f64,
    pub memory_allocatable_bytes: f64,
    /// Sums of the requests and limits (each limit at least its request) of the pods already
    /// on the node: CPU millicores, memory bytes.
    pub node_cpu_requests: f64,
    pub node_cpu_limits: f64,
    pub node_memory_requests: f64,
    pub node_memory_limits: f64,
    /// The pod's CPU (millicores) and memory (bytes) requests and limits.
    pub pod_cpu_request: f64,
    pub pod_cpu_limit: f64,
    pub pod_memory_request: f64,
    pub pod_memory_limit: f64,
    /// TargetLoadPacking's predicted CPU of the pod (its limit, else request x multiplier,
    /// else `defaultRequests`) and the "missing utilisation" of pods bound near or after the
    /// watcher window's end, millicores.
    pub tlp_pod_millis: f64,
    pub tlp_missing_millis: f64,
}

/// TargetLoadPacking: the last CPU metric whose operator is AVG or Latest (its loop has no
/// break), plus the pod's and the missing utilisation, as a percentage of capacity; the score
/// rises from `target` at 0 % to 100 at the target and falls to 0 at 100 %.
pub fn tlp_score(metrics: Option<&[Metric]>, args: &Args, np: &NodePod) -> i64 {
    let Some(metrics) = metrics.filter(|m| !m.is_empty()) else {
        return 0;
    };
    let cpu = metrics
        .iter()
        .filter(|m| m.kind == "CPU" && (m.operator == "AVG" || m.operator == "Latest"))
        .map(|m| m.value)
        .next_back();
    let Some(percent) = cpu else { return 0 };
    let cap = np.cpu_capacity_millis;
    let used = percent / 100.0 * cap;
    let predicted = if cap == 0.0 {
        0.0
    } else {
        100.0 * (used + np.tlp_pod_millis + np.tlp_missing_millis) / cap
    };
    let target = args.target_utilization;
    if predicted > target {
        if predicted > 100.0 {
            return 0;
        }
        return (target * (100.0 - predicted) / (100.0 - target)).round() as i64;
    }
    ((100.0 - target) * predicted / target + target).round() as i64
}

/// The plugins' per-type data (`GetResourceData`): AVG sets avg, STD sets std, "" or Latest
/// sets avg only while no AVG was seen; any metric of the type makes it valid.
pub fn resource_data(metrics: &[Metric], kind: &str) -> Option<(f64, f64)> {
    let (mut avg, mut std, mut avg_found, mut valid) = (0.0, 0.0, false, false);
    for m in metrics.iter().filter(|m| m.kind == kind) {
        match m.operator.as_str() {
            "AVG" => {
                avg = m.value;
                avg_found = true;
            }
            "STD" => std = m.value,
            "" | "Latest" if !avg_found => avg = m.value,
            _ => {}
        }
        valid = true;
    }
    valid.then_some((avg, std))
}

/// (mu, sigma) of `CreateResourceStats` + `GetMuSigma`: the percentages taken of allocatable,
/// mu = (avg + request) / allocatable and sigma = std / allocatable, each clamped to [0, 1].
fn mu_sigma(avg: f64, std: f64, request: f64, allocatable: f64) -> (f64, f64) {
    if allocatable <= 0.0 {
        return (0.0, 0.0);
    }
    let used = avg * allocatable / 100.0;
    let dev = std * allocatable / 100.0;
    (
        ((used + request) / allocatable).clamp(0.0, 1.0),
        (dev / allocatable).clamp(0.0, 1.0),
    )
}

/// LoadVariationRiskBalancing: per resource risk = (mu + margin * sigma^(1/sensitivity)) / 2
/// and score (1 - risk) * 100; the node's score is the lower of CPU and memory when both have
/// data, else the one that has.
pub fn lvrb_score(metrics: Option<&[Metric]>, args: &Args, np: &NodePod) -> i64 {
    let Some(metrics) = metrics.filter(|m| !m.is_empty()) else {
        return 0;
    };
    let one = |kind: &str, request: f64, allocatable: f64| {
        resource_data(metrics, kind).map(|(avg, std)| {
            let (mu, sigma) = mu_sigma(avg, std, request, allocatable);
            let sigma = if args.sensitivity >= 0.0 {
                sigma.powf(1.0 / args.sensitivity)
            } else {
                sigma
            };
            let sigma = (sigma * args.margin).clamp(0.0, 1.0);
            (1.0 - (mu + sigma) / 2.0) * 100.0
        })
    };
    let mib = 1024.0 * 1024.0;
    let cpu = one("CPU", np.pod_cpu_request, np.cpu_allocatable_millis);
    let mem = one(
        "Memory",
        np.pod_memory_request / mib,
        np.memory_allocatable_bytes / mib,
    );
    let score = match (cpu, mem) {
        (Some(c), Some(m)) => c.min(m),
        (c, m) => c.unwrap_or(0.0).max(m.unwrap_or(0.0)),
    };
    score.round() as i64
}

/// One resource for LowRiskOverCommitment.
struct Risk {
    metrics_kind: &'static str,
    allocatable: f64,
    node_requests: f64,
    node_limits: f64,
    pod_request: f64,
    pod_limit: f64,
    weight: f64,
}

/// LowRiskOverCommitment's risk of one resource: a weighted sum of the limit risk (how far the
/// limits with the pod overcommit allocatable) and the load risk (the probability, under a beta
/// distribution fitted to the measured mean and smoothed deviation, that the load exceeds what
/// is requested on the node, conditioned on it staying under the limits).
fn lro_risk(metrics: &[Metric], r: &Risk, smoothing_window: f64) -> f64 {
    let cap = r.allocatable;
    let (request, limit) = (
        (r.node_requests + r.pod_request).min(cap),
        r.node_limits + r.pod_limit,
    );
    let (request_minus_pod, limit_minus_pod) = (r.node_requests.min(cap), r.node_limits);
    let risk_limit = if limit > cap {
        (limit - cap) / (limit - request)
    } else {
        0.0
    };
    let mut risk_load = 0.0;
    if let Some((avg, std)) = resource_data(metrics, r.metrics_kind) {
        let (mu, sigma) = mu_sigma(avg, std, 0.0, cap);
        let sigma = (sigma * smoothing_window.sqrt()).min((max_variance(mu) * 0.99).sqrt());
        let threshold = (request_minus_pod / cap).clamp(0.0, 1.0);
        let (mut prob, fit) = probability_below(mu, sigma, threshold);
        if limit_minus_pod < cap && request_minus_pod <= limit_minus_pod {
            let limit_threshold = limit_minus_pod / cap;
            if limit_threshold == 0.0 {
                prob = 1.0;
            } else if let Some((a, b)) = fit {
                let limit_prob = beta_cdf(limit_threshold, a, b);
                if limit_prob > 0.0 {
                    prob = (prob / limit_prob).clamp(0.0, 1.0);
                }
            }
        }
        risk_load = 1.0 - prob;
    }
    (r.weight * risk_limit + (1.0 - r.weight) * risk_load).clamp(0.0, 1.0)
}

/// LowRiskOverCommitment (best-effort pods and nodes without metrics score 0): 100 x (1 - the
/// larger of the CPU and memory risks).
pub fn lro_score(metrics: Option<&[Metric]>, args: &Args, np: &NodePod) -> i64 {
    if np.pod_cpu_request == 0.0
        && np.pod_memory_request == 0.0
        && np.pod_cpu_limit == 0.0
        && np.pod_memory_limit == 0.0
    {
        return 0;
    }
    let Some(metrics) = metrics.filter(|m| !m.is_empty()) else {
        return 0;
    };
    let cpu = Risk {
        metrics_kind: "CPU",
        allocatable: np.cpu_allocatable_millis,
        node_requests: np.node_cpu_requests,
        node_limits: np.node_cpu_limits,
        pod_request: np.pod_cpu_request,
        pod_limit: np.pod_cpu_limit.max(np.pod_cpu_request),
        weight: args.risk_limit_weight,
    };
    let memory = Risk {
        metrics_kind: "Memory",
        allocatable: np.memory_allocatable_bytes,
        node_requests: np.node_memory_requests,
        node_limits: np.node_memory_limits,
        pod_request: np.pod_memory_request,
        pod_limit: np.pod_memory_limit.max(np.pod_memory_request),
        weight: args.risk_limit_weight,
    };
    let risk = lro_risk(metrics, &cpu, args.smoothing_window).max(lro_risk(
        metrics,
        &memory,
        args.smoothing_window,
    ));
    ((1.0 - risk) * 100.0).round() as i64
}

fn max_variance(mu: f64) -> f64 {
    if mu > 0.0 && mu < 1.0 {
        mu * (1.0 - mu)
    } else {
        0.0
    }
}

/// P(load <= threshold) for a beta distribution with mean `mu` and deviation `sigma` (moments
/// matched), with the degenerate cases of a point mass; the fitted (alpha, beta) when fitted.
fn probability_below(mu: f64, sigma: f64, threshold: f64) -> (f64, Option<(f64, f64)>) {
    if mu == 0.0 || (sigma == 0.0 && mu <= threshold) {
        return (1.0, None);
    }
    if sigma == 0.0 {
        return (0.0, None);
    }
    let variance = sigma * sigma;
    if !(0.0..=1.0).contains(&mu) || variance >= mu * (1.0 - mu) {
        return (0.0, None);
    }
    let k = (mu * (1.0 - mu) / variance - 1.0).max(f64::MIN_POSITIVE);
    let (a, b) = (mu * k, (1.0 - mu) * k);
    (beta_cdf(threshold, a, b), Some((a, b)))
}

/// The regularized incomplete beta function I_x(a, b), 0 where it cannot be evaluated.
pub fn beta_cdf(x: f64, a: f64, b: f64) -> f64 {
    if a <= 0.0 || b <= 0.0 || !(0.0..=1.0).contains(&x) {
        return 0.0;
    }
    if x == 0.0 || x == 1.0 {
        return x;
    }
    let p = if x < (a + 1.0) / (a + b + 2.0) {
        front(x, a, b) * continued_fraction(x, a, b) / a
    } else {
        1.0 - front(1.0 - x, b, a) * continued_fraction(1.0 - x, b, a) / b
    };
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

/// x^a (1-x)^b / B(a, b).
fn front(x: f64, a: f64, b: f64) -> f64 {
    (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp()
}

/// The continued fraction of I_x(a, b), evaluated with the modified Lentz method.
fn continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    d = 1.0 / if d.abs() < TINY { TINY } else { d };
    let mut h = d;
    for m in 1..1000 {
        let m = m as f64;
        for coef in [
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + coef * d;
            d = 1.0 / if d.abs() < TINY { TINY } else { d };
            c = 1.0 + coef / c;
            if c.abs() < TINY {
                c = TINY;
            }
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine terms).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = G[1..]
        .iter()
        .enumerate()
        .fold(G[0], |s, (i, g)| s + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The argmax of `scores` (node, score), `None` when the best score is tied (the scheduler
/// then picks at random among the tied nodes).
pub fn unique_best(scores: &[(String, i64)]) -> Option<String> {
    let best = scores.iter().map(|(_, s)| *s).max()?;
    let mut top = scores.iter().filter(|(_, s)| *s == best);
    let first = top.next()?;
    top.next().is_none().then(|| first.0.clone())
}
