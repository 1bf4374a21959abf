{{/* Names and labels shared by every object of the chart. */}}
{{- define "lightsout.name" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "lightsout.labels" -}}
app.kubernetes.io/name: lightsout
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lightsout.selector" -}}
app.kubernetes.io/name: lightsout
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ServiceAccount action Jobs run as (made only where the namespaces are known). */}}
{{- define "lightsout.runnerAccount" -}}
{{- printf "%s-runner" (include "lightsout.name" .) -}}
{{- end -}}

{{/* A map as `k=v,k2=v2`, the form LIGHTSOUT_JOB_NODE_SELECTOR takes. */}}
{{- define "lightsout.pairs" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
