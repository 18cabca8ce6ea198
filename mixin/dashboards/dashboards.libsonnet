// The Grafana dashboards, by file name: dashboards/grafana/NAME is generated from each
// (mixin/generate.jsonnet).
{
  grafanaDashboards+:: {
    'kube-prober-cluster-health.json': (import 'cluster-health.libsonnet')($._config),
    'kube-prober-node-load.json': (import 'node-load.libsonnet')($._config),
    'kube-prober-self.json': (import 'self.libsonnet')($._config),
  },
}
