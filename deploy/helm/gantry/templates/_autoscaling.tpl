{{/*
gantry.workerAutoscaling is worker.autoscaling.kind (none, keda or hpa),
checked: it fails with what to change when the values cannot work.
*/}}
{{- define "gantry.workerAutoscaling" -}}
{{- $a := .Values.worker.autoscaling -}}
{{- if hasKey $a "enabled" -}}
{{- fail "worker.autoscaling.enabled was replaced by worker.autoscaling.kind: set kind: keda (what enabled: true did), hpa or none" -}}
{{- end -}}
{{- $kind := default "none" $a.kind -}}
{{- if not (has $kind (list "none" "keda" "hpa")) -}}
{{- fail (printf "worker.autoscaling.kind %q: use none, keda (a KEDA ScaledObject) or hpa (a HorizontalPodAutoscaler on an External metric)" $kind) -}}
{{- end -}}
{{- if and .Values.worker.enabled (ne $kind "none") (ne .Values.worker.kind "Deployment") -}}
{{- fail "worker.autoscaling needs worker.kind: Deployment (a DaemonSet has one worker per node, nothing to scale)" -}}
{{- end -}}
{{- if and .Values.worker.enabled (ne $kind "none") (gt (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- fail (printf "worker.autoscaling.minReplicas (%v) is above maxReplicas (%v)" $a.minReplicas $a.maxReplicas) -}}
{{- end -}}
{{- $kind -}}
{{- end -}}
