{{/* The gateway container: the main container (standalone, ingress) or the native sidecar. */}}
{{- define "countersign.container" -}}
name: countersign
image: {{ include "countersign.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if eq .Values.mode "sidecar" }}
# A native sidecar: started (startupProbe passed) before the server, stopped after it.
restartPolicy: Always
{{- end }}
args: ["serve", "--config", "/etc/countersign/config/gateway.yaml"]
ports:
  - name: mcp
    containerPort: 8080
  - name: admin
    containerPort: 9090
  {{- with include "countersign.approvalsPort" . }}
  - name: approvals
    containerPort: {{ . }}
  {{- end }}
{{- if or (include "countersign.redisEnabled" .) .Values.extraEnv }}
env:
  {{- if include "countersign.redisEnabled" . }}
  # A Secret, since the URL may carry a password. The gateway does not pass COUNTERSIGN_*
  # variables on to stdio upstreams.
  - name: COUNTERSIGN_REDIS_URL
    valueFrom:
      secretKeyRef:
        name: {{ include "countersign.redisSecret" . }}
        key: {{ .Values.redis.key }}
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
lifecycle:
  preStop:
    sleep:
      seconds: {{ .Values.shutdown.preStopSeconds }}
startupProbe:
  httpGet: { path: /healthz, port: admin }
  periodSeconds: 1
  failureThreshold: 30
livenessProbe:
  httpGet: { path: /healthz, port: admin }
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
# 503 once the drain starts, and while the replay store (Redis) does not answer.
readinessProbe:
  httpGet: { path: /readyz, port: admin }
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 2
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  privileged: false
  capabilities:
    drop: ["ALL"]
volumeMounts:
  - name: countersign-config
    mountPath: /etc/countersign/config
    readOnly: true
  # A directory mount, never subPath: subPath mounts are not updated, and the policy would
  # never reload.
  - name: countersign-policy
    mountPath: /etc/countersign/policy
    readOnly: true
  - name: countersign-signing-keys
    mountPath: /etc/countersign/keys
    readOnly: true
  - name: countersign-tmp
    mountPath: /tmp
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "countersign.volumes" -}}
- name: countersign-config
  configMap:
    name: {{ include "countersign.fullname" . }}-config
- name: countersign-policy
  configMap:
    name: {{ include "countersign.policyConfigMap" . }}
- name: countersign-signing-keys
  secret:
    secretName: {{ include "countersign.signingKeysSecret" . }}
    defaultMode: 0440
# stdio upstreams may need scratch space; the root filesystem is read-only.
- name: countersign-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Pod-level settings both modes share. */}}
{{- define "countersign.podSpec" -}}
serviceAccountName: {{ include "countersign.fullname" . }}
# The gateway never calls the Kubernetes API.
automountServiceAccountToken: false
# {{ .Values.shutdown.preStopSeconds }} (preStop) + {{ .Values.shutdown.drainTimeoutSeconds }} (drain_timeout) + {{ .Values.shutdown.stdioStopSeconds }} (stdio stop) + {{ .Values.shutdown.marginSeconds }} (margin); values.yaml `shutdown`.
terminationGracePeriodSeconds: {{ include "countersign.gracePeriod" . }}
securityContext:
  runAsNonRoot: true
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
