{{/*
Named templates for an agent's own chart: add the watchdog to an agent pod.

The short way is "agent-watchdog.inject" at the end of this file: one include around the
agent's manifest. The long way, for finer control: make this chart a dependency of the agent's
chart (alias "watchdog"), then in the pod template:

  {{- $wd := dict "root" $ "values" .Values.watchdog }}
  metadata:
    labels:      {{- include "agent-watchdog.sidecarPodLabels" $wd | nindent 8 }}
    annotations: {{- include "agent-watchdog.sidecarPodAnnotations" $wd | nindent 8 }}
  spec:
    initContainers:                                  # sidecar.native: true (default, k8s >= 1.29)
      {{- include "agent-watchdog.sidecar" $wd | nindent 8 }}
    containers:
      - name: agent
        env: {{- include "agent-watchdog.agentEnv" $wd | nindent 12 }}
      # sidecar.native: false (k8s < 1.29): include "agent-watchdog.sidecar" here instead
    volumes:
      {{- include "agent-watchdog.sidecarVolumes" $wd | nindent 8 }}

Every template takes (dict "root" $ "values" <this chart's values>): "root" is the including
chart's top-level context (for .Release), "values" this chart's values as the parent sees them
(Helm merges this chart's defaults into them). The rules ConfigMap and the Secret they refer to
are rendered by this chart in the same release. helm/agent-watchdog/examples/my-agent is a
complete example.
*/}}

{{/*
The watchdog container, a list entry: for initContainers (native sidecar, restartPolicy: Always)
or, with sidecar.native=false, for containers.
*/}}
{{- define "agent-watchdog.sidecar" -}}
{{- $kube := .root.Capabilities.KubeVersion.Version }}
{{- if and .values.sidecar.native (semverCompare "<1.29.0-0" $kube) }}
{{- /* An older API server would drop restartPolicy: the pod would wait on it forever. */}}
{{- fail (printf "sidecar.native=true needs Kubernetes >= 1.29 (native sidecars), the target is %s: set sidecar.native=false (with helm template, pass --kube-version)" $kube) }}
{{- end }}
{{- include "agent-watchdog.container" (dict "Values" .values "Release" .root.Release "Role" "sidecar" "AgentName" .agentName) | trim }}
{{- end }}

{{/* The volumes the sidecar mounts (list entries for the pod's volumes). */}}
{{- define "agent-watchdog.sidecarVolumes" -}}
{{- include "agent-watchdog.volumes" (dict "Values" .values "Release" .root.Release "Role" "sidecar") | trim }}
{{- end }}

{{/*
Env entries for the agent's container: its OTLP exporter and the watchdog client point at the
sidecar (or, with mode=gateway, at the gateway's Service), with the token when one is set.
*/}}
{{- define "agent-watchdog.agentEnv" -}}
{{- include "agent-watchdog.agentEnvEntries" . | trim }}
{{- end }}

{{- define "agent-watchdog.agentEnvEntries" -}}
{{- $ctx := dict "Values" .values "Release" .root.Release }}
{{- $v := $ctx.Values }}
{{- $host := "127.0.0.1" }}
{{- if eq $v.mode "gateway" }}
{{- $host = printf "%s.%s.svc" (include "agent-watchdog.fullname" $ctx) $ctx.Release.Namespace }}
{{- end }}
{{- $tokenSecret := include "agent-watchdog.tokenSecretName" $ctx -}}
{{- if $tokenSecret }}
- name: WATCHDOG_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $tokenSecret }}
      key: {{ $v.auth.existingSecretKey }}
{{- end }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: "http://{{ $host }}:{{ $v.ports.otlpHttp }}"
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: http/protobuf
{{- if $tokenSecret }}
# The receivers want "Authorization: Bearer <token>" (OTLP header values are URL-encoded).
- name: OTEL_EXPORTER_OTLP_HEADERS
  value: "Authorization=Bearer%20$(WATCHDOG_API_TOKEN)"
{{- end }}
# The SDK batches spans for 5 s by default; 200 ms keeps the watchdog's view current.
- name: OTEL_BSP_SCHEDULE_DELAY
  value: "200"
- name: WATCHDOG_URL
  value: "http://{{ $host }}:{{ $v.ports.api }}"
{{- if and $v.modelEndpoint.enabled $v.modelEndpoint.agentEnv }}
# The agent's OpenAI and Anthropic SDKs call the model through the watchdog's model endpoint; a
# gateway's wants its token, which an SDK set only by its base URL sends in the path, and the
# agent's name, which a sidecar knows from its pod (the path again: /agent/<name>/).
{{- $base := printf "http://%s:%v" $host $v.ports.model }}
{{- if and (eq $v.mode "gateway") $tokenSecret }}
{{- $base = printf "%s/token/$(WATCHDOG_API_TOKEN)" $base }}
{{- end }}
{{- if eq $v.mode "gateway" }}
{{- if $v.modelEndpoint.agentName }}
{{- $base = printf "%s/agent/%s" $base ($v.modelEndpoint.agentName | urlquery | replace "+" "%20") }}
{{- else if $v.modelEndpoint.agentNameLabel }}
# The pod's app name (empty when the pod lacks the label: the path then names no agent).
- name: AGENT_WATCHDOG_AGENT_NAME
  valueFrom:
    fieldRef:
      fieldPath: {{ printf "metadata.labels['%s']" $v.modelEndpoint.agentNameLabel | quote }}
{{- $base = printf "%s/agent/$(AGENT_WATCHDOG_AGENT_NAME)" $base }}
{{- end }}
{{- end }}
- name: OPENAI_BASE_URL
  value: "{{ $base }}/v1"
- name: ANTHROPIC_BASE_URL
  value: "{{ $base }}"
{{- end }}
{{- end }}

{{/* Pod labels: the PodMonitor of this release selects the pods that carry them. */}}
{{- define "agent-watchdog.sidecarPodLabels" -}}
{{- $ctx := dict "Values" .values "Release" .root.Release -}}
agent-watchdog/sidecar: {{ include "agent-watchdog.fullname" $ctx }}
{{- end }}

{{/*
Pod annotations: a checksum of what this chart puts in its Secret (token, webhooks), read by
the sidecar as env vars, so that a change restarts the pods. None for the rules: they reload
in place.
*/}}
{{- define "agent-watchdog.sidecarPodAnnotations" -}}
{{- $ctx := dict "Values" .values "Release" .root.Release -}}
checksum/agent-watchdog-secret: {{ include "agent-watchdog.secretChecksum" $ctx }}
{{- end }}

{{/*
One line instead of the templates above: the agent's chart wraps its workload manifest in a
named template and includes it through this one, which returns it with the watchdog added.

  {{- define "my-agent.deployment" }}
  apiVersion: apps/v1
  kind: Deployment
  ...                                   (the manifest, unchanged)
  {{- end }}
  {{ include "agent-watchdog.inject" (list $ "my-agent.deployment") }}

Arguments: (list ROOT TEMPLATE) with this chart's values at ROOT.Values.watchdog (the alias of
the examples), or (list ROOT TEMPLATE VALUES). Kinds: Deployment, StatefulSet, DaemonSet,
ReplicaSet, Job, CronJob, Pod. What it adds to the pod template:
- sidecar mode: the watchdog container (first of initContainers as a native sidecar, or last of
  containers with sidecar.native=false), its volumes, the PodMonitor's label;
- both modes: the checksum annotation and, in every container listed in sidecar.agentContainers
  (default: every container), the env of "agent-watchdog.agentEnv" — except the variables the
  container already sets (kept as they are, as the OpenTelemetry Operator does).
The manifest is re-serialised (keys sorted, comments gone); its values are kept.
*/}}
{{- define "agent-watchdog.inject" -}}
{{- $root := index . 0 }}
{{- $values := dict }}
{{- if eq (len .) 3 }}
{{- $values = index . 2 }}
{{- else if hasKey $root.Values "watchdog" }}
{{- $values = $root.Values.watchdog }}
{{- else }}
{{- fail "agent-watchdog.inject: no .Values.watchdog: make agent-watchdog a dependency with alias watchdog, or pass its values: (list $ TEMPLATE .Values.ALIAS)" }}
{{- end }}
{{- $wd := dict "root" $root "values" $values }}
{{- $doc := include (index . 1) $root | fromYaml }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "agent-watchdog.inject: template %s is not one YAML manifest: %s" (index . 1) $doc.Error) }}
{{- end }}
{{- $pod := dict }}
{{- if eq $doc.kind "Pod" }}
{{- $pod = $doc }}
{{- else if eq $doc.kind "CronJob" }}
{{- $pod = $doc.spec.jobTemplate.spec.template }}
{{- else if has $doc.kind (list "Deployment" "StatefulSet" "DaemonSet" "ReplicaSet" "Job") }}
{{- $pod = $doc.spec.template }}
{{- else }}
{{- fail (printf "agent-watchdog.inject: template %s renders a %s; it takes a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or Pod" (index . 1) (toString $doc.kind)) }}
{{- end }}
{{- $meta := $pod.metadata | default dict }}
{{- $_ := set $pod "metadata" $meta }}
{{- $spec := $pod.spec }}
{{- $annotations := $meta.annotations | default dict }}
{{- $_ := set $meta "annotations" (merge $annotations (include "agent-watchdog.sidecarPodAnnotations" $wd | fromYaml)) }}
{{- $agentEnv := include "agent-watchdog.agentEnv" $wd | fromYamlArray }}
{{- $wanted := $values.sidecar.agentContainers | default list }}
{{- range $container := $spec.containers }}
{{- if or (not $wanted) (has $container.name $wanted) }}
{{- $env := $container.env | default list }}
{{- $set := dict }}
{{- range $env }}{{ $_ := set $set .name true }}{{ end }}
{{- range $agentEnv }}
{{- if not (hasKey $set .name) }}{{ $env = append $env . }}{{ end }}
{{- end }}
{{- $_ := set $container "env" $env }}
{{- end }}
{{- end }}
{{- if ne $values.mode "gateway" }}
{{- $_ := set $meta "labels" (merge ($meta.labels | default dict) (include "agent-watchdog.sidecarPodLabels" $wd | fromYaml)) }}
{{- $sidecar := include "agent-watchdog.sidecar" $wd | fromYamlArray }}
{{- if $values.sidecar.native }}
{{- $_ := set $spec "initContainers" (concat $sidecar ($spec.initContainers | default list)) }}
{{- else }}
{{- $_ := set $spec "containers" (concat $spec.containers $sidecar) }}
{{- end }}
{{- $_ := set $spec "volumes" (concat ($spec.volumes | default list) (include "agent-watchdog.sidecarVolumes" $wd | fromYamlArray)) }}
{{- end }}
{{- toYaml $doc }}
{{- end }}
