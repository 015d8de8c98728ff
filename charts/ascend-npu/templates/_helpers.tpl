{{/*
The labels every object carries (Kubernetes' recommended app.kubernetes.io set). Call with
(dict "name" "ascend-npu-agent" "component" "agent" "context" $). Selectors use the name alone:
it is what kustomize installs select on too, so one can move to the other without a new
Deployment.
*/}}
{{- define "ascend-npu.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/version: {{ .context.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: ascend-npu-k8s
app.kubernetes.io/managed-by: {{ .context.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .context.Chart.Name .context.Chart.Version }}
{{- end -}}

{{/* The project's image: by digest when one is given, else by tag (the chart's appVersion). */}}
{{- define "ascend-npu.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A ServiceAccount's user name, as admission policies match it. */}}
{{- define "ascend-npu.user" -}}
system:serviceaccount:{{ .context.Release.Namespace }}:{{ .name }}
{{- end -}}

{{/*
kube-scheduler's image: the cluster's own version unless pinned (kube-scheduler must not be
newer than the API server, and may be one minor older: Kubernetes' version skew policy).
*/}}
{{- define "ascend-npu.kubeSchedulerImage" -}}
{{- $version := .Values.kubeScheduler.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{ .Values.kubeScheduler.repository }}:{{ $version }}
{{- end -}}

