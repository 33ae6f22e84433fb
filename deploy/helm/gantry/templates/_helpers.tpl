{{- define "gantry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gantry.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gantry.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gantry.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gantry.workerImage" -}}
{{- if .Values.worker.image.repository -}}
{{ .Values.worker.image.repository }}:{{ .Values.worker.image.tag | default .Chart.AppVersion }}
{{- else -}}
{{ include "gantry.image" . }}
{{- end -}}
{{- end -}}

{{- define "gantry.frontendAddress" -}}
{{ include "gantry.fullname" . }}:8980
{{- end -}}

{{/* Checks the values that would give a farm that cannot work. */}}
{{- define "gantry.validate" -}}
{{- if not (has .Values.storage.backend (list "disk" "s3")) -}}
{{- fail (printf "storage.backend %q: use disk or s3" .Values.storage.backend) -}}
{{- end -}}
{{- if and (eq .Values.storage.backend "disk") (gt (int .Values.frontend.replicas) 1) -}}
{{- fail "frontend.replicas > 1 needs storage.backend: s3: with disk storage the one frontend's volume holds the only CAS and ActionCache" -}}
{{- end -}}
{{- if and (eq .Values.storage.backend "s3") (not .Values.storage.s3.bucket) -}}
{{- fail "storage.backend s3 needs storage.s3.bucket" -}}
{{- end -}}
{{- if not .Values.postgres.dsn -}}
{{- fail "postgres.dsn is required: the schedulers elect their leader and keep their state in PostgreSQL" -}}
{{- end -}}
{{- if not (has .Values.worker.kind (list "Deployment" "DaemonSet")) -}}
{{- fail (printf "worker.kind %q: use Deployment or DaemonSet" .Values.worker.kind) -}}
{{- end -}}
{{- end -}}

{{/* The keys every server node (frontend, scheduler) shares. */}}
{{- define "gantry.commonConfig" -}}
http_listen: 0.0.0.0:9090
data_dir: /var/lib/gantry
scheduler:
  store:
    backend: postgres
    dsn: {{ .Values.postgres.dsn | quote }}
worker:
  enabled: false
{{- end -}}

{{/* The frontends' stores. */}}
{{- define "gantry.storageConfig" -}}
storage:
  cas:
    backend: {{ .Values.storage.backend }}
    {{- if eq .Values.storage.backend "s3" }}
    cache:
      max_size: {{ .Values.storage.cas.maxSize }}
    {{- else }}
    max_size: {{ .Values.storage.cas.maxSize }}
    {{- end }}
  action_cache:
    backend: {{ .Values.storage.backend }}
    {{- if eq .Values.storage.backend "disk" }}
    max_size: {{ .Values.storage.actionCache.maxSize }}
    {{- end }}
  {{- if eq .Values.storage.backend "s3" }}
  s3:
    endpoint: {{ .Values.storage.s3.endpoint | quote }}
    bucket: {{ .Values.storage.s3.bucket | quote }}
    prefix: {{ .Values.storage.s3.prefix | quote }}
    region: {{ .Values.storage.s3.region | quote }}
    path_style: {{ .Values.storage.s3.pathStyle }}
    create_bucket: {{ .Values.storage.s3.createBucket }}
    refresh_after: {{ .Values.storage.s3.refreshAfter }}
    expire_after: {{ .Values.storage.s3.expireAfter | quote }}
  {{- end }}
{{- end -}}

{{/* Env of the server pods: the pod IP, the database password, S3 keys. */}}
{{- define "gantry.serverEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- with .Values.postgres.passwordSecret }}
{{- if .name }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key }}
{{- end }}
{{- end }}
{{- if eq .Values.storage.backend "s3" }}
{{- with .Values.storage.s3.credentialsSecret }}
{{- if .name }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .secretAccessKeyKey }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "gantry.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gantry.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
