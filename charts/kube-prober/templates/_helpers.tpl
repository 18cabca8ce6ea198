{{/* The chart name, or nameOverride: the app.kubernetes.io/name label. */}}
{{- define "kube-prober.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The base of every object name: the release name when it contains the chart name. */}}
{{- define "kube-prober.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kube-prober.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries besides its selector labels. */}}
{{- define "kube-prober.commonLabels" -}}
helm.sh/chart: {{ include "kube-prober.chart" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "kube-prober.name" . }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "cluster"). */}}
{{- define "kube-prober.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-prober.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* Object labels of one component: (dict "ctx" $ "component" "cluster"). */}}
{{- define "kube-prober.labels" -}}
{{ include "kube-prober.selectorLabels" . }}
{{ include "kube-prober.commonLabels" .ctx }}
{{- end }}

{{- define "kube-prober.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "kube-prober.serviceAccountName" -}}
{{- if .Values.cluster.serviceAccount.create }}
{{- default (include "kube-prober.fullname" .) .Values.cluster.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.cluster.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kube-prober.nodeServiceAccountName" -}}
{{- if .Values.node.serviceAccount.create }}
{{- default (printf "%s-node" (include "kube-prober.fullname" .)) .Values.node.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.node.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* True (non-empty) when a push output is on. */}}
{{- define "kube-prober.sink" -}}
{{- if or .Values.otlp.enabled .Values.gcm.enabled }}true{{ end }}
{{- end }}

{{/* Leader election is on: a sink and cluster.leaderElection. */}}
{{- define "kube-prober.leaderElection" -}}
{{- if and (include "kube-prober.sink" .) .Values.cluster.leaderElection }}true{{ end }}
{{- end }}

{{/*
The lean load-watcher drop-in (manifests/components/load-watcher-lean): Nodes and NodeMetrics
only, unless loadWatcher.fullClusterRole.
*/}}
{{- define "kube-prober.lean" -}}
{{- if and .Values.loadWatcher.enabled (not .Values.loadWatcher.fullClusterRole) }}true{{ end }}
{{- end }}

{{/* Whether the cluster role watches pods: always but in the lean drop-in without the estimate. */}}
{{- define "kube-prober.watchesPods" -}}
{{- if or (not (include "kube-prober.lean" .)) (ne .Values.loadWatcher.estimateBoundPods "off") }}true{{ end }}
{{- end }}

{{/* The sink args of both roles, in the order the kustomize components add them. */}}
{{- define "kube-prober.sinkArgs" -}}
{{- if .Values.gcm.enabled }}
- --sink=gcm
{{- end }}
{{- if .Values.otlp.enabled }}
- --sink=otlp
{{- end }}
{{- end }}

{{- define "kube-prober.sinkEnv" -}}
{{- if .Values.otlp.enabled }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.otlp.endpoint | quote }}
{{- end }}
{{- end }}

{{/* The hardened container securityContext of both roles. */}}
{{- define "kube-prober.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "kube-prober.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  initialDelaySeconds: 10
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}

{{/* The cluster role's pod template, for the Deployment and the sharded StatefulSet. */}}
{{- define "kube-prober.clusterPodTemplate" -}}
{{- $sel := dict "ctx" . "component" "cluster" -}}
metadata:
  labels:
    {{- include "kube-prober.selectorLabels" $sel | nindent 4 }}
    {{- with .Values.cluster.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $ann := dict }}
  {{- if .Values.prometheusAnnotations.enabled }}
  {{- $_ := set $ann "prometheus.io/scrape" "true" }}
  {{- $_ := set $ann "prometheus.io/port" (toString .Values.cluster.port) }}
  {{- $_ := set $ann "prometheus.io/path" "/metrics" }}
  {{- end }}
  {{- $ann = merge (deepCopy .Values.cluster.podAnnotations) $ann }}
  {{- with $ann }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "kube-prober.serviceAccountName" . }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.cluster.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  # Above --shutdown-timeout: the final push and the Lease release fit before SIGKILL.
  terminationGracePeriodSeconds: 30
  securityContext:
    {{- include "kube-prober.podSecurityContext" . | nindent 4 }}
  {{- $nodeSelector := deepCopy .Values.cluster.nodeSelector }}
  {{- if and .Values.gcm.enabled .Values.gcm.gcpServiceAccount }}
  {{- $_ := set $nodeSelector "iam.gke.io/gke-metadata-server-enabled" "true" }}
  {{- end }}
  {{- with $nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.cluster.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.cluster.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
      labelSelector:
        matchLabels:
          {{- include "kube-prober.selectorLabels" $sel | nindent 10 }}
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "kube-prober.selectorLabels" $sel | nindent 10 }}
  containers:
    - name: kube-prober
      image: {{ include "kube-prober.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - --role=cluster
        - --listen=0.0.0.0:{{ .Values.cluster.port }}
        - --log-format={{ .Values.logFormat }}
        - --shutdown-timeout={{ .Values.shutdownTimeout }}
        {{- if .Values.cluster.sharding.enabled }}
        - --shard-from-statefulset
        {{- end }}
        {{- if ne (join "," .Values.cluster.workloadNamespaces) "kube-system" }}
        - --workload-namespaces={{ join "," .Values.cluster.workloadNamespaces }}
        {{- end }}
        {{- if .Values.node.enabled }}
        - --gcm-node-series=false
        {{- if not (include "kube-prober.lean" .) }}
        - --pod-scope=workloads
        {{- end }}
        {{- end }}
        {{- if include "kube-prober.lean" . }}
        - --pod-scope={{ if include "kube-prober.watchesPods" . }}bound{{ else }}none{{ end }}
        - --watch-workloads=false
        - --disable-probes=metrics_server,apiserver_readyz,cluster_dns
        {{- end }}
        {{- if and .Values.loadWatcher.enabled (ne .Values.loadWatcher.estimateBoundPods "off") }}
        - --watcher-estimate-bound-pods={{ .Values.loadWatcher.estimateBoundPods }}
        {{- end }}
        {{- if include "kube-prober.sink" . }}
        {{- if .Values.cluster.leaderElection }}
        - --leader-elect=true
        {{- if ne (include "kube-prober.fullname" .) "kube-prober" }}
        - --leader-elect-lease-name={{ include "kube-prober.fullname" . }}
        {{- end }}
        {{- else }}
        - --leader-elect=false
        {{- end }}
        {{- end }}
        {{- with include "kube-prober.sinkArgs" . }}
        {{- . | trim | nindent 8 }}
        {{- end }}
        {{- with .Values.cluster.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        {{- with include "kube-prober.sinkEnv" . }}
        {{- . | trim | nindent 8 }}
        {{- end }}
        {{- if .Values.loadWatcher.enabled }}
        - name: METRICS_PROVIDER_NAME
          value: {{ .Values.loadWatcher.metricsProviderName | quote }}
        {{- end }}
        {{- with .Values.cluster.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ .Values.cluster.port }}
          protocol: TCP
      resources:
        {{- toYaml .Values.cluster.resources | nindent 8 }}
      {{- include "kube-prober.probes" . | nindent 6 }}
      securityContext:
        runAsNonRoot: true
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities:
          drop: [ALL]
        seccompProfile:
          type: RuntimeDefault
{{- end }}
