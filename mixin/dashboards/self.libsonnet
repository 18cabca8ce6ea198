// kube-prober / Self health: instances, scrapes, sources and sinks, ticks, leader election.
local lib = import 'lib.libsonnet';

function(c)
  local q(fmt) = lib.q(c, fmt);
  lib.dashboard(
    c,
    'kube-prober-self',
    'Self health',
    'Sources and sinks, tick duration, snapshot age, leader election, scrapes.',
    [
      lib.table('Instances', [
        q('max by (instance, version) (kube_prober_build_info{%(s)s})'),
        q('max by (instance, role, cluster) (kube_prober_cluster_info{%(s)s})'),
      ]),
      lib.timeseries('Scrape duration', [
        [q('max by (instance) (scrape_duration_seconds{%(s)s})'), '{{instance}}'],
      ], unit='s'),
      lib.timeseries('Source up', [
        [q('min by (instance, source) (kube_prober_source_up{%(s)s})'), '{{source}} ({{instance}})'],
      ]),
      lib.timeseries('Source runs and errors per second', [
        [
          q('sum by (instance, source) (rate(kube_prober_source_runs_total{%(s)s}[$__rate_interval]))'),
          '{{source}} runs ({{instance}})',
        ],
        [
          q('sum by (instance, source, reason) (rate(kube_prober_source_errors_total{%(s)s}[$__rate_interval]))'),
          '{{source}} {{reason}} ({{instance}})',
        ],
      ], unit='ops'),
      lib.timeseries("Time since each source's last success", [
        [
          q('time() - max by (instance, source) (kube_prober_source_last_success_timestamp_seconds{%(s)s})'),
          '{{source}} ({{instance}})',
        ],
      ], unit='s'),
      lib.timeseries('Source run duration', [
        [
          q('max by (instance, source) (kube_prober_source_last_run_duration_seconds{%(s)s})'),
          '{{source}} ({{instance}})',
        ],
      ], unit='s'),
      lib.timeseries('Sink pushes and failures per second', [
        [
          q('sum by (instance, sink) (rate(kube_prober_sink_pushes_total{%(s)s}[$__rate_interval]))'),
          '{{sink}} pushes ({{instance}})',
        ],
        [
          q('sum by (instance, sink, reason) (rate(kube_prober_sink_failures_total{%(s)s}[$__rate_interval]))'),
          '{{sink}} {{reason}} ({{instance}})',
        ],
      ], unit='ops'),
      lib.timeseries('Sink push duration', [
        [q('max by (instance, sink) (kube_prober_sink_push_duration_seconds{%(s)s})'), '{{sink}} ({{instance}})'],
      ], unit='s'),
      lib.timeseries('Tick duration', [
        [q('max by (instance) (kube_prober_tick_duration_seconds{%(s)s})'), '{{instance}}'],
      ], unit='s'),
      lib.timeseries('Snapshot age at scrape', [
        [q('max by (instance) (kube_prober_snapshot_age_seconds{%(s)s})'), '{{instance}}'],
      ], unit='s'),
      lib.timeseries('Leader', [
        [q('max by (instance, lease) (kube_prober_leader{%(s)s})'), '{{instance}} {{lease}}'],
        [q('sum by (lease) (kube_prober_leader{%(s)s})'), 'holders of {{lease}}'],
      ], description='1 while the replica holds the Lease; exactly one holder expected.'),
      lib.timeseries('Leader changes per hour', [
        [
          q('sum by (lease) (rate(kube_prober_leader_acquired_total{%(s)s}[$__rate_interval])) * 3600'),
          '{{lease}}',
        ],
      ]),
    ],
    node=false,
  )
