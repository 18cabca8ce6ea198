// The kube-prober monitoring mixin: alerts, recording rules and Grafana dashboards, laid out as
// the kube-state-metrics and node_exporter mixins are (mixin/README.md). Override `_config`
// (config.libsonnet) to fit your Prometheus:
//
//   (import 'kube-prober-mixin/mixin.libsonnet') + { _config+:: { clusterLabel: 'k8s_cluster' } }
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
