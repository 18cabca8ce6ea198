// The alert rules: one group, `kube-prober`. Runbooks: docs/alerts.md (one section per alert).
//
// Series from the two cluster-role replicas are identical; every rule aggregates with max/min
// by the object's own labels, so a node or addon alerts once, not once per replica.
{
  local c = $._config,

  // `n minutes`, `n times` and a ratio in words, for the summaries.
  local minutes(n) = if n == 1 then 'a minute' else '%d minutes' % n,
  local times(n) = if n == 1 then 'once' else if n == 2 then 'twice' else '%d times' % n,
  local share(r) = if r == 0.5 then 'half' else '%g%%' % (r * 100),

  // The dashboard that shows an alert's series, by its file name in grafanaDashboards.
  local dashboard(file) =
    if c.grafanaUrl == '' then {}
    else { dashboard_url: '%s/d/%s' % [c.grafanaUrl, $.grafanaDashboards[file].uid] },

  // One alerting rule with its runbook link (and dashboard link) and severity.
  local alert(name, expr, minutesFor, severity, summary, board) = {
    alert: name,
    expr: expr,
    'for': '%dm' % minutesFor,
    labels: { severity: severity },
    annotations: {
      summary: summary,
      runbook: c.runbookUrlFormat % std.asciiLower(name),
    } + dashboard(board),
  },

  local cluster = 'kube-prober-cluster-health.json',
  local selfHealth = 'kube-prober-self.json',
  local load = 'kube-prober-node-load.json',

  prometheusAlerts+:: {
    groups+: [
      {
        name: 'kube-prober',
        rules: [
          alert(
            'KubeProberNodeNotReady',
            |||
              max by (node) (kube_prober_node_condition{condition="Ready", status!="True"}) == 1
            |||,
            c.nodeNotReadyMinutes,
            'warning',
            'Node {{ $labels.node }} has not been Ready for %s.' % minutes(c.nodeNotReadyMinutes),
            cluster,
          ),
          alert(
            'KubeProberNodeUnavailable',
            |||
              max by (node) (kube_prober_node_available) == 0
            |||,
            c.nodeUnavailableMinutes,
            'warning',
            'Node {{ $labels.node }} has been unavailable (not ready, unschedulable or still warming up) for %s.'
            % minutes(c.nodeUnavailableMinutes),
            cluster,
          ),
          alert(
            'KubeProberAddonBelowExpected',
            |||
              sum by (addon) (max by (node, addon) (kube_prober_addon_ready_pods))
                <
              sum by (addon) (max by (namespace, workload, addon) (kube_prober_addon_expected_pods))
            |||,
            c.addonBelowExpectedMinutes,
            'warning',
            'Addon {{ $labels.addon }} has {{ $value }} ready pods, fewer than expected, for %s.'
            % minutes(c.addonBelowExpectedMinutes),
            cluster,
          ),
          alert(
            'KubeProberAddonRestarting',
            |||
              max by (namespace, pod, container) (increase(kube_prober_container_restarts_total[%dm])) > %d
            ||| % [c.addonRestartsWindowMinutes, c.addonRestarts],
            c.addonRestartingMinutes,
            'warning',
            'Container {{ $labels.container }} of addon pod {{ $labels.namespace }}/{{ $labels.pod }} restarted more than %s in %s.'
            % [times(c.addonRestarts), minutes(c.addonRestartsWindowMinutes)],
            cluster,
          ),
          alert(
            'KubeProberProbeFailing',
            |||
              min by (instance, probe, target) (kube_prober_probe_success) == 0
            |||,
            c.probeFailingMinutes,
            'warning',
            'Probe {{ $labels.probe }} ({{ $labels.target }}) from {{ $labels.instance }} has failed for %s.'
            % minutes(c.probeFailingMinutes),
            cluster,
          ),
          alert(
            'KubeProberSourceStale',
            |||
              time() - max by (instance, source) (kube_prober_source_last_success_timestamp_seconds) > %d
            ||| % (c.sourceStaleAfterMinutes * 60),
            c.sourceStaleMinutes,
            'warning',
            'Source {{ $labels.source }} on {{ $labels.instance }} has not succeeded for over %s; its data is stale.'
            % minutes(c.sourceStaleAfterMinutes),
            selfHealth,
          ),
          alert(
            'KubeProberStaleUsage',
            |||
              max by (instance) (kube_prober_watcher_stale_hosts) > 0
            |||,
            c.staleUsageMinutes,
            'warning',
            '{{ $value }} nodes have usage older than --watcher-max-age on {{ $labels.instance }}; /watcher leaves them out, so Trimaran scores them as nodes without metrics.',
            load,
          ),
          alert(
            'KubeProberSinkFailing',
            |||
              sum by (instance, sink) (rate(kube_prober_sink_failures_total[%(w)dm]))
                /
              sum by (instance, sink) (rate(kube_prober_sink_pushes_total[%(w)dm]))
                > %(r)g
            ||| % { w: c.sinkFailureWindowMinutes, r: c.sinkFailureRatio },
            c.sinkFailingMinutes,
            'warning',
            "More than %s of {{ $labels.instance }}'s pushes to {{ $labels.sink }} failed in the last %s."
            % [share(c.sinkFailureRatio), minutes(c.sinkFailureWindowMinutes)],
            selfHealth,
          ),
          alert(
            'KubeProberNoLeader',
            |||
              sum by (lease) (kube_prober_leader) < 1
            |||,
            c.noLeaderMinutes,
            'warning',
            'No kube-prober replica has held Lease {{ $labels.lease }} for %s; cluster-level series are not pushed.'
            % minutes(c.noLeaderMinutes),
            selfHealth,
          ),
          alert(
            'KubeProberDown',
            |||
              up{%s} == 0
            ||| % c.kubeProberSelector,
            c.downMinutes,
            'critical',
            'Prometheus cannot scrape kube-prober at {{ $labels.instance }} (job {{ $labels.job }}).',
            selfHealth,
          ),
        ],
      },
    ],
  },
}
