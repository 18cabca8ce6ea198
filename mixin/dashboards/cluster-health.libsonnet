// kube-prober / Cluster health: nodes, addons, probes.
local lib = import 'lib.libsonnet';

function(c)
  local q(fmt) = lib.q(c, fmt);
  lib.dashboard(
    c,
    'kube-prober-cluster',
    'Cluster health',
    'Node conditions and availability, unschedulable nodes, addons against expected, addon restarts with the last termination reason, probe success and latency.',
    [
      lib.timeseries('Nodes by state', [
        [
          q('sum by (ready, schedulable, done_warming) (max by (pool, zone, ready, schedulable, done_warming, available) (kube_prober_cluster_nodes{%(s)s}))'),
          'ready={{ready}} schedulable={{schedulable}} warm={{done_warming}}',
        ],
      ], description='kube_prober_cluster_nodes: nodes per combination of readiness, schedulability and warm-up.'),
      lib.table('Unavailable nodes', [
        q('max by (node, pool, zone, ready, schedulable, done_warming) (kube_prober_node_available{%(n)s}) == 0'),
      ], description='Nodes that are not ready, not schedulable or still warming up.'),
      lib.table('Node conditions not OK', [
        q('max by (node, condition, status) (kube_prober_node_condition{%(n)s, condition="Ready", status!="True"}) == 1 or max by (node, condition, status) (kube_prober_node_condition{%(n)s, condition!="Ready", status="True"}) == 1'),
      ], description='Ready not True, or a pressure condition True.'),
      lib.stat('Unschedulable nodes', [
        [q('count(max by (node) (kube_prober_node_available{%(s)s, schedulable="false"}))'), 'unschedulable'],
      ], description='Cordoned or tainted unschedulable.', w=6),
      lib.stat('Available nodes', [
        [
          q('sum(max by (node) (kube_prober_node_available{%(s)s})) / count(max by (node) (kube_prober_node_available{%(s)s}))'),
          'available',
        ],
      ], unit='percentunit', w=6),
      lib.timeseries('Addons: ready pods against expected', [
        [q('sum by (addon) (max by (node, addon) (kube_prober_addon_ready_pods{%(s)s}))'), '{{addon}} ready'],
        [
          q('sum by (addon) (max by (namespace, workload, addon) (kube_prober_addon_expected_pods{%(s)s}))'),
          '{{addon}} expected',
        ],
      ], w=24),
      lib.table('Addon pods not ready by node', [
        q('max by (node, addon, version, controller) (kube_prober_addon_available{%(n)s}) == 0'),
      ]),
      lib.table('Addon container restarts and last termination', [
        q('max by (namespace, pod, container, node, addon) (kube_prober_container_restarts_total{%(n)s}) > 0'),
        q('max by (namespace, pod, container, reason, exit_code) (kube_prober_container_last_termination{%(s)s})'),
      ], description="Restart counts of addon containers that restarted, and the reason and exit code of each one's last termination."),
      lib.timeseries('Addon restarts per hour', [
        [
          q('sum by (namespace, pod, container) (max by (namespace, pod, container) (rate(kube_prober_container_restarts_total{%(n)s}[$__rate_interval]))) * 3600'),
          '{{namespace}}/{{pod}} {{container}}',
        ],
      ], w=24),
      lib.timeseries('Probe success', [
        [q('min by (instance, probe, target) (kube_prober_probe_success{%(s)s})'), '{{probe}} {{target}} ({{instance}})'],
      ], description='1 when the newest run of the probe succeeded.'),
      lib.timeseries('Probe latency p90', [
        [
          q('histogram_quantile(0.9, sum by (probe, le) (rate(kube_prober_probe_duration_seconds_bucket{%(s)s}[$__rate_interval])))'),
          '{{probe}}',
        ],
      ], unit='s'),
      lib.timeseries('Probe failures by reason', [
        [q('sum by (probe, reason) (rate(kube_prober_probe_failures_total{%(s)s}[$__rate_interval]))'), '{{probe}} {{reason}}'],
      ], unit='ops', w=24),
    ],
  )
