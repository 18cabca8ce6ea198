// kube-prober / Node load (as Trimaran sees it): the usage windows /watcher serves, against
// capacity, allocatable and pod requests.
local lib = import 'lib.libsonnet';

function(c)
  local q(fmt) = lib.q(c, fmt);
  // One resource's utilization of one operator (avg, latest, std) per node.
  local ratio(resource, by, matchers) =
    q('max by (%s) (kube_prober_node_%s_utilization_ratio{%%(n)s, %s})' % [by, resource, matchers]);
  lib.dashboard(
    c,
    'kube-prober-node-load',
    'Node load (as Trimaran sees it)',
    'The CPU and memory windows /watcher serves to Trimaran (avg and std over 15m/10m/5m, latest), with capacity, allocatable and pod requests.',
    [
      lib.timeseries('CPU utilization: AVG per window', [
        [ratio('cpu', 'node, window', 'operator="avg"'), '{{node}} {{window}}'],
      ], unit='percentunit', description='What TargetLoadPacking reads (AVG over the 15m window, as percent in /watcher).'),
      lib.timeseries('CPU utilization: latest and STD (15m)', [
        [ratio('cpu', 'node', 'operator="latest"'), '{{node}} latest'],
        [ratio('cpu', 'node', 'operator="std", window="15m"'), '{{node}} std'],
      ], unit='percentunit', description='LoadVariationRiskBalancing reads AVG + STD.'),
      lib.timeseries('Memory utilization: AVG per window', [
        [ratio('memory', 'node, window', 'operator="avg"'), '{{node}} {{window}}'],
      ], unit='percentunit'),
      lib.timeseries('Memory utilization: latest and STD (15m)', [
        [ratio('memory', 'node', 'operator="latest"'), '{{node}} latest'],
        [ratio('memory', 'node', 'operator="std", window="15m"'), '{{node}} std'],
      ], unit='percentunit'),
      lib.timeseries('CPU cores: capacity, allocatable, requested', [
        [q('max by (node) (kube_prober_node_cpu_capacity_cores{%(n)s})'), '{{node}} capacity'],
        [q('max by (node) (kube_prober_node_allocatable_cpu_cores{%(n)s})'), '{{node}} allocatable'],
        [q('max by (node) (kube_prober_node_pod_requests_cpu_cores{%(n)s})'), '{{node}} requests'],
      ]),
      lib.timeseries('Memory: capacity, allocatable, requested', [
        [q('max by (node) (kube_prober_node_memory_capacity_bytes{%(n)s})'), '{{node}} capacity'],
        [q('max by (node) (kube_prober_node_allocatable_memory_bytes{%(n)s})'), '{{node}} allocatable'],
        [q('max by (node) (kube_prober_node_pod_requests_memory_bytes{%(n)s})'), '{{node}} requests'],
      ], unit='bytes'),
      lib.timeseries('Requested share of allocatable', [
        [
          q('max by (node) (kube_prober_node_pod_requests_cpu_cores{%(n)s}) / max by (node) (kube_prober_node_allocatable_cpu_cores{%(n)s})'),
          '{{node}} cpu',
        ],
        [
          q('max by (node) (kube_prober_node_pod_requests_memory_bytes{%(n)s}) / max by (node) (kube_prober_node_allocatable_memory_bytes{%(n)s})'),
          '{{node}} memory',
        ],
      ], unit='percentunit', description='Requests against what the scheduler can place: compare with the measured load above.'),
      lib.timeseries('Age of the newest usage sample', [
        [q('time() - max by (node) (kube_prober_node_usage_timestamp_seconds{%(n)s})'), '{{node}}'],
      ], unit='s', description='Trimaran keeps the last data forever; this shows how old it is.'),
      lib.timeseries('Samples behind each window', [
        [q('max by (node, resource, window) (kube_prober_node_usage_samples{%(n)s})'), '{{node}} {{resource}} {{window}}'],
      ], w=24),
    ],
  )
