{{/*
Name of the chart's objects: the release name when it already contains
"reloadlet", else "<release>-reloadlet"; 63 characters at most.
*/}}
{{- define "reloadlet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Namespace the agent runs in. */}}
{{- define "reloadlet.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
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
