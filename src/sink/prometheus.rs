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
use crate::model::{
    AddonOnNode, ClusterState, NodePods, Operator, PROBE_BUCKETS, Resource, Snapshot, unix_seconds,
};

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

type Labels<'a> = Vec<(&'static str, &'a str)>;

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

fn flag(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

fn one_if(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// The Kubernetes-derived families (cluster and node roles).
fn render_cluster(w: &mut Writer, cs: &ClusterState) {
    let (mut alloc_cpu, mut alloc_mem, mut cond, mut avail) = (vec![], vec![], vec![], vec![]);
    for n in &cs.nodes {
        let node = n.name.as_str();
        if let Some(a) = n.allocatable {
            alloc_cpu.push((vec![("node", node)], a.cpu_cores));
            alloc_mem.push((vec![("node", node)], a.memory_bytes));
        }
        for (t, st) in &n.conditions {
            let labels = vec![
                ("node", node),
                ("pool", n.placement.pool.as_str()),
                ("zone", n.placement.zone.as_str()),
                ("condition", t.as_str()),
                ("status", st.as_str()),
            ];
            cond.push((labels, 1.0));
        }
        let labels = vec![
            ("node", node),
            ("pool", n.placement.pool.as_str()),
            ("zone", n.placement.zone.as_str()),
            ("ready", flag(n.ready)),
            ("schedulable", flag(n.schedulable)),
            ("done_warming", flag(n.done_warming)),
        ];
        avail.push((labels, one_if(n.available())));
    }
    w.family(&names::NODE_ALLOCATABLE_CPU, &alloc_cpu);
    w.family(&names::NODE_ALLOCATABLE_MEMORY, &alloc_mem);

    let counts = crate::model::cluster::node_availability_counts(&cs.nodes);
    let rows: Vec<_> = counts
        .iter()
        .map(|((pl, (r, s, d, a)), n)| {
            let labels = vec![
                ("pool", pl.pool.as_str()),
                ("zone", pl.zone.as_str()),
                ("ready", flag(*r)),
                ("schedulable", flag(*s)),
                ("done_warming", flag(*d)),
                ("available", flag(*a)),
            ];
            (labels, f64::from(*n))
        })
        .collect();
    w.family(&names::CLUSTER_NODES, &rows);
    let counts = crate::model::cluster::node_condition_counts(&cs.nodes);
    let rows: Vec<_> = counts
        .iter()
        .map(|((pl, t, st), n)| {
            let labels = vec![
                ("pool", pl.pool.as_str()),
                ("zone", pl.zone.as_str()),
                ("condition", t.as_str()),
                ("status", st.as_str()),
            ];
            (labels, f64::from(*n))
        })
        .collect();
    w.family(&names::CLUSTER_NODE_CONDITIONS, &rows);
    w.family(&names::NODE_CONDITION, &cond);
    w.family(&names::NODE_AVAILABLE, &avail);

    let mut ctl_avail = vec![];
    for n in &cs.nodes {
        let addons_ok = cs
            .addons
            .get(&n.name)
            .is_none_or(|a| a.iter().all(|x| x.available()));
        let labels = vec![
            ("node", n.name.as_str()),
            ("pool", n.placement.pool.as_str()),
            ("zone", n.placement.zone.as_str()),
        ];
        ctl_avail.push((labels, one_if(n.available() && addons_ok)));
    }
    w.family(&names::NODE_ADDONS_AVAILABLE, &ctl_avail);

    let expected: Vec<_> = cs
        .expected
        .iter()
        .map(|e| {
            let labels = vec![
                ("namespace", e.namespace.as_str()),
                ("workload", e.workload.as_str()),
                ("addon", e.addon.name.as_str()),
                ("version", e.addon.version.as_str()),
                ("controller", e.addon.controller.as_str()),
            ];
            (labels, f64::from(e.expected))
        })
        .collect();
    w.family(&names::ADDON_EXPECTED_PODS, &expected);
    let addon_rows = |f: fn(&AddonOnNode) -> f64| {
        cs.addons
            .iter()
            .flat_map(|(node, list)| {
                list.iter().map(move |a| {
                    let labels = vec![
                        ("node", node.as_str()),
                        ("addon", a.addon.name.as_str()),
                        ("version", a.addon.version.as_str()),
                        ("controller", a.addon.controller.as_str()),
                    ];
                    (labels, f(a))
                })
            })
            .collect::<Vec<_>>()
    };
    w.family(&names::ADDON_PODS, &addon_rows(|a| f64::from(a.pods)));
    w.family(
        &names::ADDON_READY_PODS,
        &addon_rows(|a| f64::from(a.ready)),
    );
    w.family(
        &names::ADDON_AVAILABLE,
        &addon_rows(|a| one_if(a.available())),
    );

    let pods_rows = |f: fn(&NodePods) -> f64| {
        cs.node_pods
            .iter()
            .map(|(node, p)| (vec![("node", node.as_str())], f(p)))
            .collect::<Vec<_>>()
    };
    w.family(
        &names::NODE_POD_REQUESTS_CPU,
        &pods_rows(|p| p.requests.cpu_cores),
    );
    w.family(
        &names::NODE_POD_REQUESTS_MEMORY,
        &pods_rows(|p| p.requests.memory_bytes),
    );
    w.family(
        &names::NODE_POD_LIMITS_CPU,
        &pods_rows(|p| p.limits.cpu_cores),
    );
    w.family(
        &names::NODE_POD_LIMITS_MEMORY,
        &pods_rows(|p| p.limits.memory_bytes),
    );
    w.family(&names::NODE_PODS, &pods_rows(|p| f64::from(p.pods)));

    let mut restarts = vec![];
    let mut last = vec![];
    let exit_codes: Vec<Vec<String>> = cs
        .restarts
        .iter()
        .map(|p| {
            p.containers
                .iter()
                .map(|c| c.last_exit_code.map(|e| e.to_string()).unwrap_or_default())
                .collect()
        })
        .collect();
    for (p, codes) in cs.restarts.iter().zip(&exit_codes) {
        let addon = p
            .addon
            .as_ref()
            .map(|a| a.name.as_str())
            .unwrap_or_default();
        let node = p.node.as_deref().unwrap_or_default();
        for (c, code) in p.containers.iter().zip(codes) {
            let labels = vec![
                ("namespace", p.namespace.as_str()),
                ("pod", p.pod.as_str()),
                ("container", c.name.as_str()),
                ("node", node),
                ("addon", addon),
            ];
            restarts.push((labels, f64::from(c.restarts)));
            if c.last_reason.is_some() || c.last_exit_code.is_some() {
                let labels = vec![
                    ("namespace", p.namespace.as_str()),
                    ("pod", p.pod.as_str()),
                    ("container", c.name.as_str()),
                    ("reason", c.last_reason.as_deref().unwrap_or("unknown")),
                    (
                        "exit_code",
                        if code.is_empty() {
                            "unknown"
                        } else {
                            code.as_str()
                        },
                    ),
                ];
                last.push((labels, 1.0));
            }
        }
    }
    w.family(&names::CONTAINER_RESTARTS, &restarts);
    w.family(&names::CONTAINER_LAST_TERMINATION, &last);
    let skipped: Vec<_> = cs
        .skipped
        .iter()
        .map(|(r, n)| (vec![("reason", r.as_str())], *n as f64))
        .collect();
    w.family(&names::CLUSTER_SKIPPED_OBJECTS, &skipped);
}

fn operator_label(op: Operator) -> &'static str {
    match op {
        Operator::Avg => "avg",
        Operator::Std => "std",
    }
}

/// Every family but the snapshot age, in `names::ALL` order. Made once per tick.
pub fn render(snap: &Snapshot, format: Format) -> String {
    let mut w = Writer {
        out: String::with_capacity(4096 + snap.nodes.len() * 4096),
        format,
    };
    let version = env!("CARGO_PKG_VERSION");
    w.family(&names::BUILD_INFO, &[(vec![("version", version)], 1.0)]);
    w.family(
        &names::CLUSTER_INFO,
        &[(
            vec![
                ("cluster", snap.cluster.cluster_name.as_str()),
                ("role", snap.cluster.role.as_str()),
                ("project", snap.cluster.project.as_str()),
                ("location", snap.cluster.location.as_str()),
            ],
            1.0,
        )],
    );

    for resource in Resource::ALL {
        let mut rows = Vec::new();
        for (name, n) in &snap.nodes {
            if let Some(&v) = n.latest.get(&resource) {
                rows.push((
                    vec![
                        ("node", name.as_str()),
                        ("window", "instant"),
                        ("operator", "latest"),
                    ],
                    v,
                ));
            }
            for ws in &n.windows {
                let win = ws.window.as_str();
                if let Some(s) = ws.stats.get(&resource) {
                    for (op, v) in [("avg", s.avg), ("std", s.std)] {
                        let labels =
                            vec![("node", name.as_str()), ("window", win), ("operator", op)];
                        rows.push((labels, v));
                    }
                    continue;
                }
                // Backend-aggregated, when the hub has no samples of its own for it.
                for b in ws
                    .backend
                    .iter()
                    .filter(|b| b.value.resource == Some(resource))
                {
                    let op = operator_label(b.value.operator);
                    let labels = vec![("node", name.as_str()), ("window", win), ("operator", op)];
                    rows.push((labels, b.value.value));
                }
            }
        }
        w.family(names::node_resource_family(resource), &rows);
    }

    let mut other = Vec::new();
    for (name, n) in &snap.nodes {
        for ws in &n.windows {
            for b in ws.backend.iter().filter(|b| b.value.resource.is_none()) {
                other.push((
                    vec![
                        ("node", name.as_str()),
                        ("window", ws.window.as_str()),
                        ("operator", operator_label(b.value.operator)),
                        ("metric", b.value.name.as_str()),
                        ("type", b.value.kind.as_wire()),
                    ],
                    b.value.value,
                ));
            }
        }
    }
    w.family(&names::NODE_BACKEND_VALUE, &other);

    let mut samples = Vec::new();
    let mut stamps = Vec::new();
    let mut cpu_cap = Vec::new();
    let mut mem_cap = Vec::new();
    for (name, n) in &snap.nodes {
        for ws in &n.windows {
            for (r, s) in &ws.stats {
                samples.push((
                    vec![
                        ("node", name.as_str()),
                        ("resource", r.as_str()),
                        ("window", ws.window.as_str()),
                    ],
                    f64::from(s.samples),
                ));
            }
        }
        stamps.push((
            vec![("node", name.as_str()), ("source", n.source.as_str())],
            unix_seconds(n.latest_at),
        ));
        if let Some(c) = n.capacity {
            cpu_cap.push((vec![("node", name.as_str())], c.cpu_cores));
            mem_cap.push((vec![("node", name.as_str())], c.memory_bytes));
        }
    }
    w.family(&names::NODE_USAGE_SAMPLES, &samples);
    w.family(&names::NODE_USAGE_TIMESTAMP, &stamps);
    // Capacity the usage source did not give, from the Node objects.
    if let Some(cs) = &snap.cluster_state {
        let has_usage_capacity =
            |name: &str| snap.nodes.get(name).is_some_and(|l| l.capacity.is_some());
        for n in cs.nodes.iter().filter(|n| !has_usage_capacity(&n.name)) {
            if let Some(c) = n.capacity {
                cpu_cap.push((vec![("node", n.name.as_str())], c.cpu_cores));
                mem_cap.push((vec![("node", n.name.as_str())], c.memory_bytes));
            }
        }
        cpu_cap.sort_by(|a, b| a.0.cmp(&b.0));
        mem_cap.sort_by(|a, b| a.0.cmp(&b.0));
    }
    w.family(&names::NODE_CPU_CAPACITY, &cpu_cap);
    w.family(&names::NODE_MEMORY_CAPACITY, &mem_cap);
    if let Some(cs) = &snap.cluster_state {
        render_cluster(&mut w, cs);
    }

    let probe_rows = |f: fn(&crate::model::ProbeState) -> f64| {
        snap.probes
            .iter()
            .map(|p| {
                (
                    vec![("probe", p.probe.as_str()), ("target", p.target.as_str())],
                    f(p),
                )
            })
            .collect::<Vec<_>>()
    };
    w.family(
        &names::PROBE_SUCCESS,
        &probe_rows(|p| if p.failure.is_none() { 1.0 } else { 0.0 }),
    );
    let hist: Vec<_> = snap
        .probes
        .iter()
        .map(|p| {
            let labels = vec![("probe", p.probe.as_str()), ("target", p.target.as_str())];
            (labels, p.buckets.as_slice(), p.duration_sum, p.runs)
        })
        .collect();
    w.histogram(&names::PROBE_DURATION, &PROBE_BUCKETS, &hist);
    w.family(&names::PROBE_RUNS, &probe_rows(|p| p.runs as f64));
    let failures: Vec<_> = snap
        .probes
        .iter()
        .flat_map(|p| {
            p.failures.iter().map(|(reason, n)| {
                let labels = vec![
                    ("probe", p.probe.as_str()),
                    ("target", p.target.as_str()),
                    ("reason", reason.as_str()),
                ];
                (labels, *n as f64)
            })
        })
        .collect();
    w.family(&names::PROBE_FAILURES, &failures);

    let per_source = |f: fn(&crate::model::SourceStatus) -> Option<f64>| {
        snap.sources
            .values()
            .filter_map(|s| f(s).map(|v| (vec![("source", s.name.as_str())], v)))
            .collect::<Vec<_>>()
    };
    let by_reason =
        |f: fn(&crate::model::SourceStatus) -> &std::collections::BTreeMap<String, u64>| {
            snap.sources
                .values()
                .flat_map(|s| {
                    f(s).iter().map(|(reason, n)| {
                        (
                            vec![("source", s.name.as_str()), ("reason", reason.as_str())],
                            *n as f64,
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
    w.family(
        &names::SOURCE_UP,
        &per_source(|s| Some(if s.up { 1.0 } else { 0.0 })),
    );
    w.family(&names::SOURCE_RUNS, &per_source(|s| Some(s.runs as f64)));
    w.family(&names::SOURCE_ERRORS, &by_reason(|s| &s.errors));
    w.family(
        &names::SOURCE_NO_DATA,
        &per_source(|s| Some(s.no_data as f64)),
    );
    w.family(&names::SOURCE_DROPPED_VALUES, &by_reason(|s| &s.dropped));
    w.family(
        &names::SOURCE_LAST_RUN_DURATION,
        &per_source(|s| Some(s.last_duration.as_secs_f64())),
    );
    w.family(
        &names::SOURCE_LAST_SUCCESS,
        &per_source(|s| s.last_success.map(unix_seconds)),
    );

    let per_sink = |f: fn(&crate::model::SinkStatus) -> Option<f64>| {
        snap.sinks
            .values()
            .filter_map(|s| f(s).map(|v| (vec![("sink", s.name.as_str())], v)))
            .collect::<Vec<_>>()
    };
    w.family(&names::SINK_PUSHES, &per_sink(|s| Some(s.pushes as f64)));
    let sink_failures: Vec<_> = snap
        .sinks
        .values()
        .flat_map(|s| {
            s.failures.iter().map(|(reason, n)| {
                (
                    vec![("sink", s.name.as_str()), ("reason", reason.as_str())],
                    *n as f64,
                )
            })
        })
        .collect();
    w.family(&names::SINK_FAILURES, &sink_failures);
    w.family(
        &names::SINK_SKIPPED_TICKS,
        &per_sink(|s| Some(s.skipped as f64)),
    );
    w.family(&names::SINK_POINTS, &per_sink(|s| Some(s.points as f64)));
    w.family(
        &names::SINK_REQUESTS,
        &per_sink(|s| Some(s.requests as f64)),
    );
    w.family(
        &names::SINK_LAST_SUCCESS,
        &per_sink(|s| s.last_success.map(unix_seconds)),
    );
    w.family(
        &names::SINK_PUSH_DURATION,
        &per_sink(|s| Some(s.last_duration.as_secs_f64())),
    );

    w.family(&names::TICKS, &[(vec![], snap.tick as f64)]);
    w.family(
        &names::TICK_DURATION,
        &[(vec![], snap.last_tick_duration.as_secs_f64())],
    );
    w.out
}

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
    w.family(&names::SNAPSHOT_AGE, &[(vec![], age)]);
    if format == Format::OpenMetrics {
        w.out.push_str("# EOF\n");
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
