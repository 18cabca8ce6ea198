// Recording rules. kube-prober's series are already the aggregates its dashboards and alerts
// need (usage windows, per-node sums, counts by state), so there are none: every query reads
// kube_prober_* directly. The field is kept, empty, for tools that take all three of
// prometheusAlerts, prometheusRules and grafanaDashboards; a rule added here goes into a
// group of its own.
{
  prometheusRules+:: {
    groups+: [],
  },
}
