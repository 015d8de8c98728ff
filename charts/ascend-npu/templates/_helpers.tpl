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
The Kubernetes the chart needs (Chart.yaml says why it has no kubeVersion). Against a cluster
(helm install, upgrade, template --validate: discovery lists kinds, so "v1/Pod" is there) the
API server must serve ValidatingAdmissionPolicy v1 (1.30), and with dra.enabled
resource.k8s.io/v1 (1.34). Offline (helm template) only a --kube-version given is checked:
v1.20.0 is Helm's default when none is (chartutil.DefaultCapabilities), not a cluster's.
*/}}
{{- define "ascend-npu.checkCluster" -}}
{{- $version := .Capabilities.KubeVersion.Version -}}
{{- if .Capabilities.APIVersions.Has "v1/Pod" -}}
{{- if not (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") -}}
{{- fail (printf "ascend-npu needs Kubernetes 1.30 or newer: this API server (%s) does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, which confines the agent and the scheduler" $version) -}}
{{- end -}}
{{- if and .Values.dra.enabled (not (.Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass")) -}}
{{- fail (printf "dra.enabled needs Kubernetes 1.34 or newer: this API server (%s) does not serve resource.k8s.io/v1" $version) -}}
{{- end -}}
{{- else if and (ne $version "v1.20.0") (semverCompare "<1.30.0-0" $version) -}}
{{- fail (printf "ascend-npu needs Kubernetes 1.30 or newer (ValidatingAdmissionPolicy v1); --kube-version says %s" $version) -}}
{{- else if and (ne $version "v1.20.0") .Values.dra.enabled (semverCompare "<1.34.0-0" $version) -}}
{{- fail (printf "dra.enabled needs Kubernetes 1.34 or newer (resource.k8s.io/v1); --kube-version says %s" $version) -}}
{{- end -}}
{{- end -}}

{{/*
kube-scheduler's image: the cluster's own version unless pinned (kube-scheduler must not be
newer than the API server, and may be one minor older: Kubernetes' version skew policy); with
kubeScheduler.digest, repository:version@digest (the runtime pulls the digest, the tag names it).
*/}}
{{- define "ascend-npu.kubeSchedulerImage" -}}
{{- if .Values.kubeScheduler.plugin -}}
{{- .Values.kubeScheduler.pluginImage | required "kubeScheduler.plugin needs kubeScheduler.pluginImage: kube-scheduler-ascend's image, built by `python -m image.kube_scheduler` and pushed to your registry (docs/scheduler.md, \"The kube-scheduler plugin\")" -}}
{{- else -}}
{{- if and (not .Values.kubeScheduler.tag) (eq .Capabilities.KubeVersion.Version "v1.20.0") -}}
{{- fail "kubeScheduler.tag is empty and the cluster's version is unknown (helm template without --kube-version assumes v1.20.0): pass --kube-version <your API server's version>, or --set kubeScheduler.tag=v1.x.y (not newer than the API server)" -}}
{{- end -}}
{{- $version := .Values.kubeScheduler.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{ .Values.kubeScheduler.repository }}:{{ $version }}
{{- with .Values.kubeScheduler.digest }}@{{ . }}{{ end }}
{{- end -}}
{{- end -}}

{{/*
The admission policies' shared CEL, written once here (tests/deploy keeps the lists equal to
the code's):
- ourAnnotations: the pod annotations only the scheduler and the agent write
  (contract.annotations.WRITTEN_BY_US).
- npuVariables: the NPU resources (contract.objects.is_npu_resource: the placed ones, and a
  static vNPU type's, which the kubelet picks).
- asksNpus: whether the pod (the CEL variable named by the argument: "object" or
  "oldObject") asks NPUs: any container, init containers included, requests or limits.
- changeVariables: what an UPDATE changes: the keys of metadata.labels and
  metadata.annotations added, removed or changed, and whether all else a writer of metadata
  has no business with (spec, status, owners, finalizers) is as it was.
*/}}
{{- define "ascend-npu.ourAnnotations" -}}
['huawei.com/Ascend910', 'huawei.com/Ascend310', 'huawei.com/Ascend310P',
'huawei.com/npu', 'huawei.com/npu-core', 'predicate-time', 'huawei.com/AscendReal',
'huawei.com/kltDev', 'ascend.kubectl.kubernetes.io/ascend-910-configuration',
'ascend.kubectl.kubernetes.io/ascend-npu-configuration', 'hccl/rankIndex',
'super-pod-rank', 'super-pod-id', 'isSharedTor', 'isHealthy', 'sharedTorIp',
'ascend-npu.io/deleting', 'reschedule-in-place']
{{- end -}}

{{- define "ascend-npu.npuVariables" -}}
- name: npuResources
  expression: >-
    ['huawei.com/Ascend910', 'huawei.com/Ascend310', 'huawei.com/Ascend310P',
    'huawei.com/npu', 'huawei.com/npu-core']
- name: vnpuResource
  expression: >-
    '^huawei\\.com/(Ascend910-([2-6]|8|10|12|16)c|Ascend310P-(1|2|4)c)'
{{- end -}}

{{- define "ascend-npu.asksNpus" -}}
((has({{ . }}.spec.initContainers) ? {{ . }}.spec.initContainers : []) +
{{ . }}.spec.containers).exists(c, has(c.resources) &&
  ((has(c.resources.limits) ? c.resources.limits : {}).exists(r,
    r in variables.npuResources || r.matches(variables.vnpuResource)) ||
  (has(c.resources.requests) ? c.resources.requests : {}).exists(r,
    r in variables.npuResources || r.matches(variables.vnpuResource))))
{{- end -}}

{{- define "ascend-npu.changeVariables" -}}
- name: updated
  expression: request.operation == 'UPDATE'
- name: newLabels
  expression: >-
    variables.updated && has(object.metadata.labels) ? object.metadata.labels : {}
- name: oldLabels
  expression: >-
    variables.updated && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}
- name: newAnnotations
  expression: >-
    variables.updated && has(object.metadata.annotations) ? object.metadata.annotations : {}
- name: oldAnnotations
  expression: >-
    variables.updated && has(oldObject.metadata.annotations)
    ? oldObject.metadata.annotations : {}
- name: changedLabels
  expression: >-
    variables.newLabels.filter(k, !(k in variables.oldLabels) ||
      variables.oldLabels[k] != variables.newLabels[k]) +
    variables.oldLabels.filter(k, !(k in variables.newLabels))
- name: changedAnnotations
  expression: >-
    variables.newAnnotations.filter(k, !(k in variables.oldAnnotations) ||
      variables.oldAnnotations[k] != variables.newAnnotations[k]) +
    variables.oldAnnotations.filter(k, !(k in variables.newAnnotations))
- name: onlyMetadata
  expression: >-
    variables.updated &&
    has(object.spec) == has(oldObject.spec) &&
    (!has(object.spec) || object.spec == oldObject.spec) &&
    has(object.status) == has(oldObject.status) &&
    (!has(object.status) || object.status == oldObject.status) &&
    (has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : []) ==
    (has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences : []) &&
    (has(object.metadata.finalizers) ? object.metadata.finalizers : []) ==
    (has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : [])
{{- end -}}

{{/*
How the agent and the DRA driver reach the chips' device nodes (npu-smi and DCMI open
/dev/davinci_manager, /dev/davinciN, /dev/devmm_svm and /dev/hisi_hdc): nodeDevices.access, or
when empty the least that works for the driver: none for the fake driver, privileged for
npu-smi (no other means gives a container device nodes without a runtime that injects them).
Call with (dict "driver" "npu-smi" "context" $).
*/}}
{{- define "ascend-npu.deviceAccess" -}}
{{- .context.Values.nodeDevices.access | default (ternary "none" "privileged" (eq .driver "fake")) -}}
{{- end -}}

{{/*
The node components' container securityContext, as NVIDIA's device plugin runs
(NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml: no privilege
escalation, every capability dropped) unless the chips need privilege. Root without
capabilities: the kubelet's socket directories are root's (owner rwx), nothing else is needed.
*/}}
{{- define "ascend-npu.nodeSecurityContext" -}}
{{- if eq (include "ascend-npu.deviceAccess" .) "privileged" -}}
# privileged: the runtime gives the container the host's device nodes and a device cgroup
# allowing them, as Huawei's ascend-device-plugin DaemonSets run (Ascend/mind-cluster
# component/ascend-device-plugin/build/ascendplugin-910.yaml); it implies every capability.
privileged: true
{{- else -}}
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
runAsUser: 0
readOnlyRootFilesystem: true
{{- end -}}

{{/*
nodeDevices.access runtime: the Ascend container runtime (the node's default runtime, or the
RuntimeClass nodeDevices.runtimeClassName) injects the chips ASCEND_VISIBLE_DEVICES names, with
their device cgroup, as it does for the training containers (Ascend/ascend-docker-runtime).
*/}}
{{- define "ascend-npu.deviceEnv" -}}
{{- if eq (include "ascend-npu.deviceAccess" .) "runtime" -}}
- name: ASCEND_VISIBLE_DEVICES
  value: {{ .context.Values.nodeDevices.visibleDevices | quote }}
{{- end -}}
{{- end -}}

{{- define "ascend-npu.runtimeClass" -}}
{{- if and (eq (include "ascend-npu.deviceAccess" .) "runtime") .context.Values.nodeDevices.runtimeClassName -}}
runtimeClassName: {{ .context.Values.nodeDevices.runtimeClassName }}
{{- end -}}
{{- end -}}

{{/* The host's driver, npu-smi and install record, read-only (none for the fake driver). */}}
{{- define "ascend-npu.driverMounts" -}}
{{- if ne (include "ascend-npu.deviceAccess" .) "none" -}}
- name: driver
  mountPath: /usr/local/Ascend/driver
  readOnly: true
# The host's npu-smi (installed with the driver), on the image's PATH.
- name: npu-smi
  mountPath: /usr/local/sbin/npu-smi
  readOnly: true
- name: install-info
  mountPath: /etc/ascend_install.info
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "ascend-npu.driverVolumes" -}}
{{- if ne (include "ascend-npu.deviceAccess" .) "none" -}}
- name: driver
  hostPath:
    path: /usr/local/Ascend/driver
    type: Directory
- name: npu-smi
  hostPath:
    path: /usr/local/sbin/npu-smi
    type: File
# Where the driver was installed: npu-smi reads it to find its libraries.
- name: install-info
  hostPath:
    path: /etc/ascend_install.info
    type: File
{{- end -}}
{{- end -}}

{{/* The schedulerNames NPU pods may choose, comma-joined: npuSchedulerNames, or the one
schedulerPath installs ("" with schedulerPath none). The NPU pod policy admits these and the
service binds and annotates only their pods. */}}
{{- define "ascend-npu.npuSchedulerNames" -}}
{{- $names := .Values.npuSchedulerNames -}}
{{- if not $names -}}
{{- $names = get (dict "kube-scheduler" (list "ascend-npu-scheduler") "volcano" (list "volcano")) .Values.schedulerPath | default (list) -}}
{{- end -}}
{{- $names | join "," -}}
{{- end -}}

{{/*
Whether a monitoring.* switch is on ("true" or empty): true or false as given; auto when the
API server serves the Prometheus Operator's monitoring.coreos.com/v1, whose PodMonitor and
PrometheusRule kinds an install without it would refuse. Call with
(dict "switch" .Values.monitoring.podMonitors "context" $).
*/}}
{{- define "ascend-npu.monitoringOn" -}}
{{- if eq (toString .switch) "auto" -}}
{{- if .context.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- else if .switch -}}
true
{{- end -}}
{{- end -}}

{{/*
The variables of the DRA claim policies about claims written for Huawei's DRA driver (its
DeviceClass npu.huawei.com, which the chart gives this driver's chips): its exact requests,
whether they ask 2 to 4 chips together (one request of 2 to 4, or 2 to 4 requests of one) and
whether a constraint on a group attribute covers them all. Needs variables.requests and
variables.constraints.
*/}}
{{- define "ascend-npu.huaweiClaimVariables" -}}
- name: huaweiClass
  expression: "'npu.huawei.com'"
- name: groupAttribute
  expression: "'{{ .Values.dra.driverName }}/group'"
- name: huaweiRequests
  expression: >-
    variables.requests.filter(r, has(r.exactly) &&
      r.exactly.deviceClassName == variables.huaweiClass &&
      (!has(r.exactly.allocationMode) || r.exactly.allocationMode == 'ExactCount'))
- name: huaweiTogether
  expression: >-
    size(variables.huaweiRequests) == 1
    ? (has(variables.huaweiRequests[0].exactly.count)
       ? variables.huaweiRequests[0].exactly.count : 1) in [2, 3, 4]
    : (size(variables.huaweiRequests) in [2, 3, 4] &&
       variables.huaweiRequests.all(r, !has(r.exactly.count) || r.exactly.count == 1))
- name: huaweiGrouped
  expression: >-
    variables.constraints.exists(c, has(c.matchAttribute) &&
      c.matchAttribute in [variables.groupAttribute,
        '{{ .Values.dra.driverName }}/hccsRing', '{{ .Values.dra.driverName }}/die',
        '{{ .Values.dra.driverName }}/mesh'] &&
      (!has(c.requests) || size(c.requests) == 0 ||
       variables.huaweiRequests.all(r, r.name in c.requests)))
{{- end -}}
