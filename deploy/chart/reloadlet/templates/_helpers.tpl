{{/*
Name of the chart's objects: fullnameOverride when set, else the release name
when it already contains "reloadlet", else "<release>-reloadlet"; 63
characters at most. Another workload of the chart names itself
"<fullname>-<component>".
*/}}
{{- define "reloadlet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Namespace of every namespaced object: the release's (`helm install -n`). */}}
{{- define "reloadlet.namespace" -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/* Labels that select the agent pods (must never change between upgrades). */}}
{{- define "reloadlet.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "reloadlet.labels" -}}
{{ include "reloadlet.selectorLabels" . }}
app.kubernetes.io/part-of: reloadlet
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Image reference: repository:tag, the tag defaulting to the appVersion. */}}
{{- define "reloadlet.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
Labels of the agent's pods and of the objects that belong to it; the
selector labels plus app.kubernetes.io/component (a second workload of the
chart passes its own component).
*/}}
{{- define "reloadlet.agentSelectorLabels" -}}
{{ include "reloadlet.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{/*
The `job` label Prometheus gives the agents' series: the Service's name, as
the chart's ServiceMonitor scrapes it (Prometheus Operator's default job
label), unless prometheusRule.job says otherwise.
*/}}
{{- define "reloadlet.job" -}}
{{- .Values.prometheusRule.job | default (include "reloadlet.fullname" .) -}}
{{- end -}}
