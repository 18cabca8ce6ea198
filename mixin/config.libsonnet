// What a user of the mixin may change: override fields of `_config` (mixin/README.md).
// The defaults give exactly the files shipped under dashboards/.
{
  _config+:: {
    // The `up` series of the jobs that scrape kube-prober, for KubeProberDown (every other
    // rule reads kube_prober_* series, which only kube-prober exports). The default matches
    // the kustomize manifests in any namespace: plain Prometheus (manifests/components/
    // prometheus-annotations: job `kube-prober`) and the Prometheus Operator (the
    // ServiceMonitor's job is its Service's `app.kubernetes.io/name`, `kube-prober`; the
    // PodMonitor's is `NAMESPACE/kube-prober-node`). The Helm chart renders its own from the
    // release's names; for another scrape configuration set the jobs it gives, e.g.
    // 'job=~"my-kube-prober|monitoring/my-kube-prober-node"'.
    kubeProberSelector: 'job=~"(.+/)?kube-prober(-node)?"',

    // The label that tells clusters apart on a Prometheus (or Thanos, Mimir) holding several;
    // the dashboards' `cluster` variable lists its values and every query filters on it. A
    // Prometheus of one cluster has no such label: the variable's "All" (`.*`) matches the
    // empty value.
    clusterLabel: 'cluster',

    // Grafana's base URL (`https://grafana.example.com`). Set, every alert gets a
    // `dashboard_url` annotation linking the dashboard that shows its series; empty, none.
    grafanaUrl: '',

    // Where each alert's runbook is: `%s` is the alert's name in lower case, the anchor of its
    // section in docs/alerts.md. Written as the `runbook` annotation.
    runbookUrlFormat: 'docs/alerts.md#%s',

    // The dashboards: their tags, refresh and time range, and the prefix of their titles.
    dashboardTags: ['kube-prober'],
    dashboardRefresh: '30s',
    dashboardFrom: 'now-6h',
    dashboardTitlePrefix: 'kube-prober / ',

    // Alert thresholds. `...Minutes` are how long a condition must hold (the rule's `for`)
    // unless said otherwise; the summaries say the same numbers.
    nodeNotReadyMinutes: 10,
    nodeUnavailableMinutes: 15,
    addonBelowExpectedMinutes: 15,
    // KubeProberAddonRestarting: more than this many restarts of one container ...
    addonRestarts: 2,
    // ... within this window (minutes), held for `addonRestartingMinutes`.
    addonRestartsWindowMinutes: 15,
    addonRestartingMinutes: 5,
    probeFailingMinutes: 10,
    // KubeProberSourceStale: no success of a source for longer than this (minutes) ...
    sourceStaleAfterMinutes: 5,
    // ... held for this long.
    sourceStaleMinutes: 5,
    staleUsageMinutes: 10,
    // KubeProberSinkFailing: the share of a sink's pushes that failed (0 to 1) ...
    sinkFailureRatio: 0.5,
    // ... over this window (minutes), held for `sinkFailingMinutes`.
    sinkFailureWindowMinutes: 10,
    sinkFailingMinutes: 15,
    noLeaderMinutes: 5,
    downMinutes: 5,
  },
}
