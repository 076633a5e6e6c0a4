{{/* Names and labels shared by every template. */}}

{{- define "dlbench.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dlbench.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dlbench.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "dlbench.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dlbench
{{- end -}}

{{- define "dlbench.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dlbench.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "dlbench.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dlbench.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Leader election: always with more than one replica. */}}
{{- define "dlbench.leaderElect" -}}
{{- if or (gt (int .Values.operator.replicas) 1) .Values.operator.leaderElection -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{- define "dlbench.monitoring" -}}
{{- if and .Values.monitoring.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}true{{- end -}}
{{- end -}}

{{/* An image value, {repository, tag, pullPolicy}, as repository:tag (tag default: appVersion). */}}
{{- define "dlbench.image" -}}
{{- $image := index . 0 -}}{{- $root := index . 1 -}}
{{ $image.repository }}:{{ $image.tag | default $root.Chart.AppVersion }}
{{- end }}
