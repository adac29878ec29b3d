{{/* Chart name, overridable with nameOverride. */}}
{{- define "topo-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name prefix of every object: the release name, plus the chart name unless it is already in it. */}}
{{- define "topo-scheduler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "topo-scheduler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "topo-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Metadata annotations of every object (empty when commonAnnotations is). */}}
{{- define "topo-scheduler.annotations" -}}
{{- with .Values.commonAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Selector labels; call with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "topo-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "topo-scheduler.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Service account names. */}}
{{- define "topo-scheduler.schedulerServiceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create }}
{{- default (printf "%s-scheduler" (include "topo-scheduler.fullname" .)) .Values.scheduler.serviceAccount.name }}
{{- else }}
{{- required "scheduler.serviceAccount.name is required when scheduler.serviceAccount.create is false" .Values.scheduler.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "topo-scheduler.agentServiceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (printf "%s-agent" (include "topo-scheduler.fullname" .)) .Values.agent.serviceAccount.name }}
{{- else }}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the ConfigMap holding config.yaml, and of the leader-election Lease. */}}
{{- define "topo-scheduler.configMapName" -}}
{{- printf "%s-config" (include "topo-scheduler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "topo-scheduler.leaseName" -}}
{{- default (include "topo-scheduler.fullname" .) .Values.scheduler.leaderElection.leaseName }}
{{- end }}

{{/* Image reference: digest wins over tag; the tag defaults to the appVersion. */}}
{{- define "topo-scheduler.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Container security context: no privilege, no capability, read-only root filesystem.
     Call with (dict "uid" 65532): a non-root UID also sets runAsNonRoot. */}}
{{- define "topo-scheduler.containerSecurityContext" -}}
{{- if eq (int .uid) 0 -}}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
{{- else -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
{{- end }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The KubeSchedulerConfiguration written into the ConfigMap, built from scheduler.config. */}}
{{- define "topo-scheduler.schedulerConfig" -}}
{{- $cfg := .Values.scheduler.config }}
{{- $score := dict }}
{{- $enabled := list }}
{{- range $name, $weight := $cfg.scoreWeights }}
{{- if not (has $name $cfg.scoreDisabled) }}
{{- $enabled = append $enabled (dict "name" $name "weight" (int $weight)) }}
{{- end }}
{{- end }}
{{- if $enabled }}{{ $_ := set $score "enabled" $enabled }}{{ end }}
{{- if $cfg.scoreDisabled }}
{{- $disabled := list }}
{{- range $cfg.scoreDisabled }}{{ $disabled = append $disabled (dict "name" .) }}{{ end }}
{{- $_ := set $score "disabled" $disabled }}
{{- end }}
{{- $plugins := dict }}
{{- if $score }}{{ $_ := set $plugins "score" $score }}{{ end }}
{{- if $cfg.filterDisabled }}
{{- $disabled := list }}
{{- range $cfg.filterDisabled }}{{ $disabled = append $disabled (dict "name" .) }}{{ end }}
{{- $_ := set $plugins "filter" (dict "disabled" $disabled) }}
{{- end }}
{{- $profile := dict "schedulerName" .Values.scheduler.schedulerName }}
{{- if $plugins }}{{ $_ := set $profile "plugins" $plugins }}{{ end }}
{{- if $cfg.pluginConfig }}{{ $_ := set $profile "pluginConfig" $cfg.pluginConfig }}{{ end }}
{{- $config := dict "apiVersion" "kubescheduler.config.k8s.io/v1" "kind" "KubeSchedulerConfiguration" "profiles" (list $profile) }}
{{- if not (kindIs "invalid" $cfg.percentageOfNodesToScore) }}
{{- $_ := set $config "percentageOfNodesToScore" (int $cfg.percentageOfNodesToScore) }}
{{- end }}
{{- toYaml $config }}
{{- end }}
