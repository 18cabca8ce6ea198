// What the three Grafana dashboards share: the data source and the template variables, the
// panel kinds, and the layout (panels flow left to right, 8 units high, on a 24-unit grid).
// As the mixins' dashboards do, every query takes its data source from the `datasource`
// variable, filters on `cluster` and `job` (and `node` where nodes are shown), and takes every
// range as `$__rate_interval` (tests/deploy/dashboards.rs checks all of it).
{
  local datasource = { type: 'prometheus', uid: '${datasource}' },

  // The matchers of every query: `q(c, fmt)` fills `%(s)s` with the cluster and job matchers
  // and `%(n)s` with those and the node's.
  q(c, fmt)::
    local s = '%s=~"$cluster", job=~"$job"' % c.clusterLabel;
    fmt % { s: s, n: s + ', node=~"$node"' },

  local queryVariable(name, label, query, multi) = {
    name: name,
    label: label,
    type: 'query',
    datasource: datasource,
    query: { query: query, refId: name },
    definition: query,
    includeAll: true,
    multi: multi,
    refresh: 2,
    current: {},
    hide: 0,
    options: [],
    sort: 1,
  },

  // `datasource`, `cluster` (its "All" is `.*`: a Prometheus of one cluster has no cluster
  // label), `job` (its "All" is the jobs it finds, never every job) and, with `node`, `node`.
  variables(c, node):: [
    {
      name: 'datasource',
      label: 'Data source',
      type: 'datasource',
      query: 'prometheus',
      current: {},
      hide: 0,
      refresh: 1,
      regex: '',
      options: [],
    },
    queryVariable(
      'cluster', 'Cluster', 'label_values(kube_prober_build_info, %s)' % c.clusterLabel, false
    ) + { allValue: '.*' },
    queryVariable(
      'job', 'Job', 'label_values(kube_prober_build_info{%s=~"$cluster"}, job)' % c.clusterLabel, true
    ),
  ] + (
    if node then [
      queryVariable(
        'node', 'Node', self.q(c, 'label_values(kube_prober_node_cpu_capacity_cores{%(s)s}, node)'), true
      ) + { allValue: '.*' },
    ] else []
  ),

  // Targets from [expr, legend] pairs, lettered A, B, C...
  local targets(pairs, extra) = [
    {
      refId: std.char(65 + i),
      datasource: datasource,
      expr: pairs[i][0],
      legendFormat: pairs[i][1],
    } + extra
    for i in std.range(0, std.length(pairs) - 1)
  ],

  local panel(type, title, targets, unit, description, w) = {
    w:: w,
    title: title,
    type: type,
    datasource: datasource,
    targets: targets,
    fieldConfig: { defaults: if unit == '' then {} else { unit: unit }, overrides: [] },
    options: {},
  } + (if description == '' then {} else { description: description }),

  // A time series panel of [expr, legend] pairs.
  timeseries(title, pairs, unit='', description='', w=12)::
    panel('timeseries', title, targets(pairs, {}), unit, description, w),

  // A stat panel of [expr, legend] pairs.
  stat(title, pairs, unit='', description='', w=12)::
    panel('stat', title, targets(pairs, {}), unit, description, w),

  // A table of instant queries, one column set per expression.
  table(title, exprs, description='', w=12)::
    panel(
      'table', title, targets([[e, ''] for e in exprs], { format: 'table', instant: true }), '', description, w
    ),

  // Ids 1, 2, 3... and grid positions: left to right, a new row when the next panel does not fit.
  local place(panels) = std.foldl(
    function(acc, p)
      local wrap = acc.x + p.w > 24;
      local x = if wrap then 0 else acc.x;
      local y = if wrap then acc.y + 8 else acc.y;
      {
        x: x + p.w,
        y: y,
        out: acc.out + [p { id: std.length(acc.out) + 1, gridPos: { x: x, y: y, w: p.w, h: 8 } }],
      },
    panels,
    { x: 0, y: 0, out: [] },
  ).out,

  dashboard(c, uid, title, description, panels, node=true):: {
    uid: uid,
    title: c.dashboardTitlePrefix + title,
    description: description,
    tags: c.dashboardTags,
    timezone: 'browser',
    schemaVersion: 39,
    version: 1,
    editable: true,
    refresh: c.dashboardRefresh,
    time: { from: c.dashboardFrom, to: 'now' },
    templating: { list: $.variables(c, node) },
    annotations: { list: [] },
    panels: place(panels),
  },
}
