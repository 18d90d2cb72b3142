{{- define "countersign.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "countersign.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "countersign.selectorLabels" -}}
app.kubernetes.io/name: {{ include "countersign.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "countersign.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "countersign.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "countersign.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{- define "countersign.policyConfigMap" -}}
{{- .Values.policy.existingConfigMap | default (printf "%s-policy" (include "countersign.fullname" .)) }}
{{- end }}

{{- define "countersign.signingKeysSecret" -}}
{{- .Values.signingKeys.existingSecret | default (printf "%s-signing-keys" (include "countersign.fullname" .)) }}
{{- end }}

{{- define "countersign.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "countersign.fullname" .)) }}
{{- end }}

{{- define "countersign.redisEnabled" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret }}true{{ end }}
{{- end }}

{{/* The approvals listener's port, from `approvals.listen: HOST:PORT`; empty without one. */}}
{{- define "countersign.approvalsPort" -}}
{{- with .Values.approvals.listen }}{{ regexFind "[0-9]+$" . }}{{ end }}
{{- end }}

{{- define "countersign.gracePeriod" -}}
{{- $s := .Values.shutdown -}}
{{- add $s.preStopSeconds $s.drainTimeoutSeconds $s.stdioStopSeconds $s.marginSeconds }}
{{- end }}

{{/* gateway.yaml: the pass-through values, then the keys the chart owns (they win). */}}
{{- define "countersign.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $upstreams := .Values.upstreams -}}
{{- if eq .Values.mode "sidecar" }}
{{- $upstreams = list (dict "name" "server" "path" .Values.sidecar.upstreamPath "url" (printf "http://127.0.0.1:%d%s" (int .Values.sidecar.upstreamPort) .Values.sidecar.upstreamPath)) }}
{{- end }}
{{- $_ := set $config "upstreams" $upstreams -}}
{{- $_ = set $config "listen" "0.0.0.0:8080" -}}
{{- $_ = set $config "admin" "0.0.0.0:9090" -}}
{{- $_ = set $config "drain_timeout" (printf "%ds" (int .Values.shutdown.drainTimeoutSeconds)) -}}
{{- $_ = set $config "policy" (printf "/etc/countersign/policy/%s" .Values.policy.key) -}}
{{- $_ = set $config "signing_keys_file" (printf "/etc/countersign/keys/%s" .Values.signingKeys.key) -}}
{{- with .Values.identity }}{{ $_ = set $config "identity" . }}{{ end -}}
{{- with .Values.approvals }}{{ $_ = set $config "approvals" . }}{{ end -}}
{{- if include "countersign.redisEnabled" . }}
{{- /* The URL itself comes from the Secret as COUNTERSIGN_REDIS_URL. */ -}}
{{- $_ = set $config "redis" (dict "namespace" .Values.redis.namespace "command_timeout" .Values.redis.commandTimeout) -}}
{{- end }}
{{- toYaml $config }}
{{- end }}
