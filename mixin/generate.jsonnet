// The files under dashboards/ that the mixin makes, by path, as text (`-S -m` ends each with a
// newline):
//
//   jsonnet -S -c -m dashboards mixin/generate.jsonnet
//
// (run from the repository root with the pinned jsonnet, tests/upstream/jsonnet) writes them;
// tests/deploy/mixin.rs runs exactly that and fails when a file differs from what is checked
// in (`UPDATE_GOLDEN=1 cargo test --test deploy -- mixin::` rewrites them). Hand edits to the
// generated files are lost: change the mixin instead.
local mixin = import 'mixin.libsonnet';

// JSON as the repository writes it: two-space indents, `{}` and `[]` when empty, keys sorted
// (jsonnet has no field order); std.manifestJsonEx would write empty ones over three lines.
local json(v, indent='') =
  local inner = indent + '  ';
  if std.isObject(v) then
    if std.length(v) == 0 then '{}'
    else '{\n' + std.join(',\n', [
      inner + std.escapeStringJson(k) + ': ' + json(v[k], inner)
      for k in std.objectFields(v)
    ]) + '\n' + indent + '}'
  else if std.isArray(v) then
    if std.length(v) == 0 then '[]'
    else '[\n' + std.join(',\n', [inner + json(x, inner) for x in v]) + '\n' + indent + ']'
  else if std.isString(v) then std.escapeStringJson(v)
  else std.toString(v);

local header = |||
  # GENERATED from mixin/ (mixin/generate.jsonnet) by `jsonnet -S -c -m dashboards mixin/generate.jsonnet`;
  # do not edit: tests/deploy/mixin.rs fails when this file differs from the mixin's output.
  # manifests/components/prometheus-operator/prometheusrule.yaml and the chart's
  # files/alert-groups.yaml carry the same groups (tests/deploy/alerts.rs, helm_chart.rs).
  # Runbooks: docs/alerts.md.
|||;

{
  'alerts.yaml': header + std.manifestYamlDoc(mixin.prometheusAlerts, indent_array_in_object=true, quote_keys=false),
} + {
  ['grafana/' + name]: json(mixin.grafanaDashboards[name])
  for name in std.objectFields(mixin.grafanaDashboards)
}
