//! The families of instance.

use super::rows::*;
use super::*;
use crate::model::*;

pub const BUILD_INFO: Family = gauge(
    "kube_prober_build_info",
    "Always 1; labels give the kube-prober version.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.build.info", "", G)]);
pub const CLUSTER_INFO: Family = gauge(
    "kube_prober_cluster_info",
    "Always 1; labels give the cluster name, the role this instance runs, and on GCE the project and location.",
    None,
)
.in_scope(Scope::ClusterIdentity)
.otel(&[o("kube_prober.cluster.info", "", G)]);

/// Build and cluster info (step `Info`).
pub const INFO: &[Family] = &[BUILD_INFO, CLUSTER_INFO];

pub const PROBE_SUCCESS: Family = gauge(
    "kube_prober_probe_success",
    "1 if the newest run of the probe against the target succeeded, else 0.",
    None,
)
.in_scope(Scope::Probe)
.otel(&[o("kube_prober.probe.success", "", G)])
.gke(GkeProber {
    suffix: "cluster/probe/addons_condition",
    labels: &[
        ("name", "probe"),
        ("condition", "success"),
        ("reason", "reason"),
    ],
    kind: "GAUGE",
});
pub const PROBE_DURATION: Family = histogram(
    "kube_prober_probe_duration_seconds",
    "How long probe runs took, failed ones included.",
    Some("seconds"),
)
.in_scope(Scope::Probe)
.otel(&[o("kube_prober.probe.duration", "s", H)]);
pub const PROBE_RUNS: Family = counter(
    "kube_prober_probe_runs",
    "Probe runs, by probe and target.",
    None,
)
.in_scope(Scope::Probe)
.otel(&[o("kube_prober.probe.runs", "{run}", C)]);
pub const PROBE_FAILURES: Family = counter(
    "kube_prober_probe_failures",
    "Failed probe runs, by probe, target and reason (timeout, refused, dns, status_<code>, bad_body, no_items, too_large, error).",
    None,
)
.in_scope(Scope::Probe)
.otel(&[o("kube_prober.probe.failures", "{failure}", C)]);
pub const SOURCE_UP: Family = gauge(
    "kube_prober_source_up",
    "1 if the newest run of the source (fetcher, watcher or probe loop) succeeded, else 0.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.up", "", G)]);
pub const SOURCE_RUNS: Family = counter(
    "kube_prober_source_runs",
    "Runs of each source, successful or not.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.runs", "{run}", C)]);
pub const SOURCE_ERRORS: Family = counter(
    "kube_prober_source_errors",
    "Failed runs of each source, by reason.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.errors", "{error}", C)]);
pub const SOURCE_NO_DATA: Family = counter(
    "kube_prober_source_no_data",
    "Runs of each source that succeeded but had nothing to report.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.no_data", "{run}", C)]);
pub const SOURCE_DROPPED_VALUES: Family = counter(
    "kube_prober_source_dropped_values",
    "Values a source reported that were rejected (non_finite, negative, above_capacity, bad_capacity, unparsable), by reason.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.dropped_values", "{value}", C)]);
pub const SOURCE_EXPIRED_NODES: Family = counter(
    "kube_prober_source_expired_nodes",
    "Nodes whose usage left every output because the source stopped reporting them.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.expired_nodes", "{node}", C)]);
pub const USAGE_UNMATCHED: Family = gauge(
    "kube_prober_usage_unmatched",
    "The usage backend's self-check at its latest fetch: the cluster's nodes without usage (what=\"nodes_without_usage\") and the series whose node label names no node (what=\"series_without_node\").",
    None,
)
.otel(&[o("kube_prober.usage.unmatched", "1", G)]);
pub const SOURCE_LAST_RUN_DURATION: Family = gauge(
    "kube_prober_source_last_run_duration_seconds",
    "How long the newest run of each source took.",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.last_run.duration", "s", G)]);
pub const SOURCE_LAST_SUCCESS: Family = gauge(
    "kube_prober_source_last_success_timestamp_seconds",
    "Unix time of the newest successful run of each source (absent before the first).",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.source.last_success.timestamp", "s", G)]);
pub const WATCH_RESTARTS: Family = counter(
    "kube_prober_watch_restarts",
    "WATCH requests a Kubernetes watcher sent again without relisting, by resource and why the previous watch ended (closed, error).",
    None,
)
.otel(&[o("kube_prober.watch.restarts", "{restart}", C)]);
pub const WATCH_RELISTS: Family = counter(
    "kube_prober_watch_relists",
    "Lists a Kubernetes watcher made after its first, by resource and reason (expired, list_failed, no_resource_version).",
    None,
)
.otel(&[o("kube_prober.watch.relists", "{list}", C)]);
pub const SINK_PUSHES: Family = counter(
    "kube_prober_sink_pushes",
    "Pushes of each push output (OTLP, Cloud Monitoring), successful or not.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.pushes", "{push}", C)]);
pub const SINK_FAILURES: Family = counter(
    "kube_prober_sink_failures",
    "Failed pushes by reason.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.failures", "{failure}", C)]);
pub const SINK_SKIPPED_TICKS: Family = counter(
    "kube_prober_sink_skipped_ticks",
    "Ticks skipped because the previous push was still running.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.skipped_ticks", "{tick}", C)]);
pub const SINK_POINTS: Family = counter(
    "kube_prober_sink_points",
    "Points each push output's receiver accepted.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.points", "{point}", C)]);
pub const SINK_POINTS_DROPPED: Family = counter(
    "kube_prober_sink_points_dropped",
    "Points of each push output that no receiver accepted, by reason (tick_skipped, refused, unavailable, timeout, transport, partial, sampling_period, lost_lease, config); with kube_prober_sink_points_total, every point of every tick.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.points.dropped", "{point}", C)]);
pub const SINK_REQUESTS: Family = counter(
    "kube_prober_sink_requests",
    "Requests of each push output that the receiver answered (successfully or not).",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.requests", "{request}", C)]);
pub const SINK_LAST_SUCCESS: Family = gauge(
    "kube_prober_sink_last_success_timestamp_seconds",
    "Unix time of the newest successful push.",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.last_success.timestamp", "s", G)]);
pub const SINK_PUSH_DURATION: Family = gauge(
    "kube_prober_sink_push_duration_seconds",
    "How long the newest push took.",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.sink.push.duration", "s", G)]);
pub const LEADER: Family = gauge(
    "kube_prober_leader",
    "1 while this replica holds the leader Lease and pushes cluster-level series, else 0 (cluster role with push outputs).",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.leader", "", G)]);
pub const LEADER_ACQUIRED: Family = counter(
    "kube_prober_leader_acquired",
    "Times this replica became the holder of the leader Lease.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.leader.acquired", "{acquisition}", C)]);
pub const SHARD_INFO: Family = gauge(
    "kube_prober_shard_info",
    "Always 1 on a sharded cluster-role instance; labels give its shard and the total (total=\"0\" while the StatefulSet's replica count is not known yet: only self-metrics are emitted then).",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.shard.info", "", G)]);
pub const TICKS: Family = counter(
    "kube_prober_ticks",
    "Snapshots made by the tick loop.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.ticks", "{tick}", C)]);
pub const TICK_DURATION: Family = gauge(
    "kube_prober_tick_duration_seconds",
    "How long the previous tick took to make and render its snapshot.",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.tick.duration", "s", G)]);
pub const RUNTIME_ALIVE_TASKS: Family = gauge(
    "kube_prober_runtime_alive_tasks",
    "Tasks alive in the async runtime (spawned and not finished) when the previous tick ended.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.runtime.alive_tasks", "{task}", G)]);
pub const SNAPSHOT_AGE: Family = gauge(
    "kube_prober_snapshot_age_seconds",
    "Seconds since the snapshot this scrape was rendered from was made.",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.snapshot.age", "s", G)]);

/// This instance's own families: probes it ran, its sources, push outputs, leadership, shard
/// and ticks (step `Instance`).
pub const INSTANCE: &[Family] = &[
    PROBE_SUCCESS,
    PROBE_DURATION,
    PROBE_RUNS,
    PROBE_FAILURES,
    SOURCE_UP,
    SOURCE_RUNS,
    SOURCE_ERRORS,
    SOURCE_NO_DATA,
    SOURCE_DROPPED_VALUES,
    SOURCE_EXPIRED_NODES,
    USAGE_UNMATCHED,
    SOURCE_LAST_RUN_DURATION,
    SOURCE_LAST_SUCCESS,
    WATCH_RESTARTS,
    WATCH_RELISTS,
    SINK_PUSHES,
    SINK_FAILURES,
    SINK_SKIPPED_TICKS,
    SINK_POINTS,
    SINK_POINTS_DROPPED,
    SINK_REQUESTS,
    SINK_LAST_SUCCESS,
    SINK_PUSH_DURATION,
    LEADER,
    LEADER_ACQUIRED,
    SHARD_INFO,
    TICKS,
    TICK_DURATION,
    RUNTIME_ALIVE_TASKS,
    SNAPSHOT_AGE,
];

/// `--auth kubernetes`: requests to the protected paths by outcome.
pub const HTTP_AUTH_DECISIONS: Family = counter(
    "kube_prober_http_auth_decisions",
    "Requests to /metrics, /watcher and /watcher/health by path and decision (allowed; unauthenticated: 401; forbidden: 403; unavailable: 503, the API server did not answer a review).",
    None,
);
pub const HTTP_AUTH_REVIEWS: Family = counter(
    "kube_prober_http_auth_reviews",
    "TokenReviews (review=token) and SubjectAccessReviews (review=access) sent to the API server, by result (ok: an answer; error: none, or an error status).",
    None,
);
pub const HTTP_AUTH_CACHE_HITS: Family = counter(
    "kube_prober_http_auth_cache_hits",
    "Reviews answered from the cache (--auth-cache-ttl) instead of the API server.",
    None,
);
/// TLS on the listener.
pub const TLS_RELOADS: Family = counter(
    "kube_prober_tls_reloads",
    "Changed --tls-cert-file/--tls-key-file pairs by result (success: now served; error: rejected, the previous pair is still served).",
    None,
);

/// The listener's limits (`--server-*`): connections it closed on its own.
pub const HTTP_CONNECTIONS_SHED: Family = counter(
    "kube_prober_http_connections_shed",
    "Connections the listener closed on its own, by reason (header_timeout, idle_timeout, write_timeout, header_too_large: 431, request_line_too_long: 414, evicted: closed to make room at --server-max-connections, refused: turned away at the cap while every connection was busy).",
    None,
)
.in_scope(Scope::Instance);
/// The listener's open connections.
pub const HTTP_CONNECTIONS: Family = gauge(
    "kube_prober_http_connections",
    "Connections open on the listener, TLS handshakes included (at most --server-max-connections).",
    None,
)
.in_scope(Scope::Instance);

/// Families the HTTP server renders from its own counters on every scrape of `/metrics` (the
/// listener's always, auth and TLS only when on); not in snapshots, so the push outputs do not
/// carry them.
pub const SERVER: &[Family] = &[
    HTTP_AUTH_DECISIONS,
    HTTP_AUTH_REVIEWS,
    HTTP_AUTH_CACHE_HITS,
    TLS_RELOADS,
    HTTP_CONNECTIONS_SHED,
    HTTP_CONNECTIONS,
];

/// This instance's own families: probes, sources, sinks, leadership, ticks.
pub fn visit_instance<V: Visitor>(w: &mut V, snap: &Snapshot) {
    visit_probes(w, snap);

    visit_sources(w, snap);

    visit_sinks(w, snap);

    if let Some(l) = &snap.leadership {
        let labels = vec![("lease", l.lease.as_str())];
        w.family(
            &LEADER,
            &[(labels.clone(), if l.leading { 1.0 } else { 0.0 })],
        );
        w.family(&LEADER_ACQUIRED, &[(labels, l.acquired as f64)]);
    }
    if let Some(s) = snap.selection.shard {
        let (index, total) = (s.index.to_string(), s.total.to_string());
        w.family(
            &SHARD_INFO,
            &[(
                vec![("shard", index.as_str()), ("total", total.as_str())],
                1.0,
            )],
        );
    }
    w.family(&TICKS, &[(vec![], snap.tick as f64)]);
    w.family(
        &TICK_DURATION,
        &[(vec![], snap.last_tick_duration.as_secs_f64())],
    );
    w.family(&RUNTIME_ALIVE_TASKS, &[(vec![], snap.alive_tasks as f64)]);
}

/// The probes' families.
fn visit_probes<V: Visitor>(w: &mut V, snap: &Snapshot) {
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
        &PROBE_SUCCESS,
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
    w.histogram(&PROBE_DURATION, &PROBE_BUCKETS, &hist);
    w.family(&PROBE_RUNS, &probe_rows(|p| p.runs as f64));
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
    w.family(&PROBE_FAILURES, &failures);
}

/// The sources' families, with the watchers' restarts and relists.
fn visit_sources<V: Visitor>(w: &mut V, snap: &Snapshot) {
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
        &SOURCE_UP,
        &per_source(|s| Some(if s.up { 1.0 } else { 0.0 })),
    );
    w.family(&SOURCE_RUNS, &per_source(|s| Some(s.runs as f64)));
    w.family(&SOURCE_ERRORS, &by_reason(|s| &s.errors));
    w.family(&SOURCE_NO_DATA, &per_source(|s| Some(s.no_data as f64)));
    w.family(&SOURCE_DROPPED_VALUES, &by_reason(|s| &s.dropped));
    w.family(
        &SOURCE_EXPIRED_NODES,
        &per_source(|s| Some(s.expired as f64)),
    );
    let unmatched: Vec<_> = snap
        .sources
        .values()
        .filter_map(|s| s.usage_match.map(|m| (s.name.as_str(), m)))
        .flat_map(|(source, m)| {
            [
                ("nodes_without_usage", m.nodes_without_usage),
                ("series_without_node", m.series_without_node),
            ]
            .map(|(what, n)| (vec![("source", source), ("what", what)], n as f64))
        })
        .collect();
    w.family(&USAGE_UNMATCHED, &unmatched);
    w.family(
        &SOURCE_LAST_RUN_DURATION,
        &per_source(|s| Some(s.last_duration.as_secs_f64())),
    );
    w.family(
        &SOURCE_LAST_SUCCESS,
        &per_source(|s| s.last_success.map(unix_seconds)),
    );
    let by_resource =
        |f: fn(&crate::model::SourceStatus) -> &std::collections::BTreeMap<String, u64>| {
            snap.sources
                .values()
                .filter_map(|s| s.resource.as_deref().map(|r| (r, f(s))))
                .flat_map(|(resource, m)| {
                    m.iter().map(move |(reason, n)| {
                        (
                            vec![("resource", resource), ("reason", reason.as_str())],
                            *n as f64,
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
    w.family(&WATCH_RESTARTS, &by_resource(|s| &s.watch_restarts));
    w.family(&WATCH_RELISTS, &by_resource(|s| &s.relists));
}

/// The push outputs' families.
fn visit_sinks<V: Visitor>(w: &mut V, snap: &Snapshot) {
    let per_sink = |f: fn(&crate::model::SinkStatus) -> Option<f64>| {
        snap.sinks
            .values()
            .filter_map(|s| f(s).map(|v| (vec![("sink", s.name.as_str())], v)))
            .collect::<Vec<_>>()
    };
    w.family(&SINK_PUSHES, &per_sink(|s| Some(s.pushes as f64)));
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
    w.family(&SINK_FAILURES, &sink_failures);
    w.family(&SINK_SKIPPED_TICKS, &per_sink(|s| Some(s.skipped as f64)));
    w.family(&SINK_POINTS, &per_sink(|s| Some(s.points as f64)));
    let dropped: Vec<_> = snap
        .sinks
        .values()
        .flat_map(|s| {
            s.dropped.iter().map(|(reason, n)| {
                (
                    vec![("sink", s.name.as_str()), ("reason", reason.as_str())],
                    *n as f64,
                )
            })
        })
        .collect();
    w.family(&SINK_POINTS_DROPPED, &dropped);
    w.family(&SINK_REQUESTS, &per_sink(|s| Some(s.requests as f64)));
    w.family(
        &SINK_LAST_SUCCESS,
        &per_sink(|s| s.last_success.map(unix_seconds)),
    );
    w.family(
        &SINK_PUSH_DURATION,
        &per_sink(|s| Some(s.last_duration.as_secs_f64())),
    );
}

/// Build and cluster info: who this instance is and which cluster it watches.
pub fn visit_info<V: Visitor>(w: &mut V, snap: &Snapshot) {
    let version = env!("CARGO_PKG_VERSION");
    w.family(&BUILD_INFO, &[(vec![("version", version)], 1.0)]);
    let labels = vec![
        ("cluster", snap.cluster.cluster_name.as_str()),
        ("role", snap.cluster.role.as_str()),
        ("project", snap.cluster.project.as_str()),
        ("location", snap.cluster.location.as_str()),
    ];
    w.family(&CLUSTER_INFO, &[(labels, 1.0)]);
}
