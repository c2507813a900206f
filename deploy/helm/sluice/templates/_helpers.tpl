{{/* The image every container runs. */}}
{{- define "sluice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* sluice.toml: the values' or the base's. */}}
{{- define "sluice.settings" -}}
{{ .Values.settings | default (.Files.Get "files/base/sluice.toml") }}
{{- end -}}

{{/* The alert routes: the values' or the base's. */}}
{{- define "sluice.alertRoutes" -}}
{{ .Values.alertRoutes | default (.Files.Get "files/base/alert-routes.yaml") }}
{{- end -}}

{{/*
A ConfigMap's data from a values map (file name to text), or else from the base's folder.
Arguments: (list $ valuesMap "folder").
*/}}
{{- define "sluice.files" -}}
{{- $root := index . 0 -}}
{{- $given := index . 1 -}}
{{- $folder := index . 2 -}}
{{- $data := dict -}}
{{- if $given -}}
{{- $data = $given -}}
{{- else -}}
{{- range $path, $_ := $root.Files.Glob (printf "files/base/%s/*.yaml" $folder) -}}
{{- $_ := set $data (base $path) ($root.Files.Get $path) -}}
{{- end -}}
{{- end -}}
{{ toYaml $data }}
{{- end -}}

{{/* The data of one of the base's generated ConfigMaps, by name. Arguments: (list $ name). */}}
{{- define "sluice.configMapData" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- if eq $name "sluice-settings" -}}
{{ dict "sluice.toml" (include "sluice.settings" $root) | toYaml }}
{{- else if eq $name "sluice-alert-routes" -}}
{{ dict "alert-routes.yaml" (include "sluice.alertRoutes" $root) | toYaml }}
{{- else if eq $name "sluice-pipelines" -}}
{{ include "sluice.files" (list $root $root.Values.pipelines "pipelines") }}
{{- else if eq $name "sluice-calendars" -}}
{{ include "sluice.files" (list $root $root.Values.calendars "calendars") }}
{{- else -}}
{{ fail (printf "the base names a ConfigMap %s the chart does not make" $name) }}
{{- end -}}
{{- end -}}

{{/*
A pod template made the chart's: every container's image, the values' resources (when
given), the Secret's name, and a checksum of each ConfigMap it mounts, so that a change
rolls those pods (only those) as kustomize's hashed names do. Arguments:
(list $ podTemplate resources).
*/}}
{{- define "sluice.pod" -}}
{{- $root := index . 0 -}}
{{- $pod := index . 1 -}}
{{- $resources := index . 2 -}}
{{- $annotations := $pod.metadata.annotations | default dict -}}
{{- range $pod.spec.volumes -}}
{{- if .configMap -}}
{{- $_ := set $annotations (printf "checksum/%s" .configMap.name) (include "sluice.configMapData" (list $root .configMap.name) | sha256sum) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $pod.metadata "annotations" $annotations -}}
{{- range $pod.spec.containers -}}
{{- $_ := set . "image" (include "sluice.image" $root) -}}
{{- if $resources -}}
{{- $_ := set . "resources" $resources -}}
{{- end -}}
{{- range .env -}}
{{- if and .valueFrom .valueFrom.secretKeyRef -}}
{{- $_ := set .valueFrom.secretKeyRef "name" $root.Values.secretName -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $pod.spec.volumes -}}
{{- if .secret -}}
{{- $_ := set .secret "secretName" $root.Values.secretName -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A claim's size and class from the values, when given. Arguments: (list claimSpec storage). */}}
{{- define "sluice.storage" -}}
{{- $spec := index . 0 -}}
{{- $storage := index . 1 -}}
{{- with $storage.size -}}
{{- $_ := set $spec.resources.requests "storage" . -}}
{{- end -}}
{{- with $storage.className -}}
{{- $_ := set $spec "storageClassName" . -}}
{{- end -}}
{{- end -}}
