{{/*
Labels on every object's metadata: the kustomize base's two (app.kubernetes.io/name and
part-of) and the four Helm's conventions add (instance, version, managed-by, helm.sh/chart).
tests/tests/helm.rs removes exactly those four before comparing with the kustomize rendering.
*/}}
{{- define "nodemedic.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "nodemedic.labels" -}}
app.kubernetes.io/name: nodemedic
app.kubernetes.io/part-of: nodemedic
{{ include "nodemedic.helmLabels" . }}
{{- end }}

{{/*
The agent's configuration file: daemonset/base/config.yaml byte for byte, or, when
.Values.config sets keys, that file's keys with those merged over them (comments dropped).
*/}}
{{- define "nodemedic.config" -}}
{{- $file := .Files.Get "files/config.yaml" -}}
{{- if .Values.config -}}
{{- mergeOverwrite ($file | fromYaml) (deepCopy .Values.config) | toYaml -}}
{{- else -}}
{{- $file -}}
{{- end -}}
{{- end }}

{{/*
The configuration ConfigMap's name: nodemedic-config-<hash of its content>, the name
kustomize's configMapGenerator gives it, computed as kustomize computes it (api/hasher: the
JSON of kind, name and data, where the name it reads is empty; the first ten hex digits of its
SHA-256 with 0, 1, 3, a, e spelt g, h, k, m, t). A change of the configuration makes a new
ConfigMap and rolls the DaemonSet, as with kustomize.
*/}}
{{- define "nodemedic.configName" -}}
{{- $json := dict "kind" "ConfigMap" "name" "" "data" (dict "config.yaml" (include "nodemedic.config" .)) | toJson -}}
{{- $hex := $json | sha256sum | trunc 10 -}}
{{- printf "nodemedic-config-%s" ($hex | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end }}

{{- define "nodemedic.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The host directories the components mount read-only (each at /host plus its path, `type:
Directory`), in the order of tests/tests/helm.rs's component list.
*/}}
{{- define "nodemedic.hostDirs" -}}
{{- $dirs := list -}}
{{- if .Values.etcKubernetes.enabled -}}
{{- $dirs = append $dirs (dict "name" "host-etc-kubernetes" "path" "/etc/kubernetes") -}}
{{- end -}}
{{- if .Values.kubeletUnits.enabled -}}
{{- $dirs = append $dirs (dict "name" "host-systemd-etc" "path" "/etc/systemd/system") -}}
{{- $dirs = append $dirs (dict "name" "host-systemd-run" "path" "/run/systemd/system") -}}
{{- $dirs = append $dirs (dict "name" "host-systemd-lib" "path" "/lib/systemd/system") -}}
{{- $dirs = append $dirs (dict "name" "host-etc-default" "path" "/etc/default") -}}
{{- end -}}
{{- if .Values.kubeletUnits.sysconfig -}}
{{- $dirs = append $dirs (dict "name" "host-etc-sysconfig" "path" "/etc/sysconfig") -}}
{{- end -}}
{{- if .Values.kubeletUnits.eks -}}
{{- $dirs = append $dirs (dict "name" "host-eks-kubelet" "path" "/etc/eks/kubelet") -}}
{{- end -}}
{{- toYaml $dirs -}}
{{- end }}
