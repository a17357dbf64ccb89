{{/*
The watchdog container, shared by the sidecar (in an agent's pod) and the gateway Deployment.

Context: a root-like dict with Values (this chart's values), Release, Chart and Role
("sidecar" or "gateway"), and optionally AgentName (the model endpoint's agent name when
modelEndpoint.agentName is empty; a sidecar without either reads its pod's label
modelEndpoint.agentNameLabel through the downward API). A sidecar binds OTLP, the
control API and the model endpoint to 127.0.0.1 (only the agent in its pod can reach them; no
token needed), a gateway binds them to 0.0.0.0 (token required).
The metrics port always listens on 0.0.0.0: Prometheus and the probes reach it.
*/}}
{{- define "agent-watchdog.container" -}}
{{- $v := .Values }}
{{- $sidecar := eq .Role "sidecar" }}
{{- $bind := ternary "127.0.0.1" "0.0.0.0" $sidecar }}
{{- $tokenSecret := include "agent-watchdog.tokenSecretName" . -}}
- name: {{ ternary $v.sidecar.containerName "watchdog" $sidecar }}
  image: {{ include "agent-watchdog.image" . | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if and $sidecar $v.sidecar.native }}
  # A native sidecar (Kubernetes >= 1.29): started before the agent's containers, stopped after
  # them, and it does not keep a Job's pod from completing.
  restartPolicy: Always
  {{- end }}
  args: ["serve"]
  env:
    - name: WATCHDOG_OTLP_GRPC_ADDRESS
      value: "{{ $bind }}:{{ $v.ports.otlpGrpc }}"
    - name: WATCHDOG_OTLP_HTTP_ADDRESS
      value: "{{ $bind }}:{{ $v.ports.otlpHttp }}"
    - name: WATCHDOG_API_ADDRESS
      value: "{{ $bind }}:{{ $v.ports.api }}"
    - name: WATCHDOG_METRICS_ADDRESS
      value: "0.0.0.0:{{ $v.ports.metrics }}"
    - name: WATCHDOG_STATE_DIR
      value: /var/lib/watchdog
    {{- if $v.state.maxEndedRuns }}
    - name: WATCHDOG_STATE_MAX_ENDED_RUNS
      value: {{ include "agent-watchdog.envValue" $v.state.maxEndedRuns | quote }}
    {{- end }}
    - name: WATCHDOG_RULES
      value: /etc/watchdog/rules
    - name: WATCHDOG_DEFAULT_RULES
      value: {{ $v.rules.defaultRules | quote }}
    - name: WATCHDOG_RULES_WATCH_INTERVAL
      value: {{ include "agent-watchdog.envValue" $v.rules.watchInterval | quote }}
    {{- range $key, $value := $v.config }}
    - name: {{ printf "WATCHDOG_%s" (upper $key) }}
      value: {{ include "agent-watchdog.envValue" $value | quote }}
    {{- end }}
    {{- if $tokenSecret }}
    - name: WATCHDOG_API_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ $tokenSecret }}
          key: {{ $v.auth.existingSecretKey }}
    {{- end }}
    {{- if $v.webhooks }}
    - name: WATCHDOG_WEBHOOKS
      valueFrom:
        secretKeyRef:
          name: {{ include "agent-watchdog.secretName" . }}
          key: webhooks
    {{- end }}
    {{- with $v.forward.endpoint }}
    - name: WATCHDOG_FORWARD_ENDPOINT
      value: {{ . | quote }}
    {{- end }}
    {{- with $v.forward.headersSecret.name }}
    - name: WATCHDOG_FORWARD_HEADERS
      valueFrom:
        secretKeyRef:
          name: {{ . }}
          key: {{ $v.forward.headersSecret.key }}
    {{- end }}
    {{- with $v.modelEndpoint }}
    {{- if .enabled }}
    # The model endpoint (docs/model-endpoint.md#turn-it-on): the agent's OPENAI_BASE_URL or
    # ANTHROPIC_BASE_URL points here; the calls go on to the configured upstreams only.
    - name: WATCHDOG_MODEL_ADDRESS
      value: "{{ $bind }}:{{ $v.ports.model }}"
    {{- with .upstream }}
    - name: WATCHDOG_MODEL_UPSTREAM
      value: {{ . | quote }}
    {{- end }}
    {{- with .upstreamAnthropic }}
    - name: WATCHDOG_MODEL_UPSTREAM_ANTHROPIC
      value: {{ . | quote }}
    {{- end }}
    {{- with (.agentName | default $.AgentName) }}
    - name: WATCHDOG_MODEL_AGENT_NAME
      value: {{ . | quote }}
    {{- else }}
    {{- if and $sidecar .agentNameLabel }}
    # The pod's app name (empty when the pod lacks the label: then nothing names the agent).
    - name: WATCHDOG_MODEL_AGENT_NAME
      valueFrom:
        fieldRef:
          fieldPath: {{ printf "metadata.labels['%s']" .agentNameLabel | quote }}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: wd-otlp-grpc
      containerPort: {{ $v.ports.otlpGrpc }}
      protocol: TCP
    - name: wd-otlp-http
      containerPort: {{ $v.ports.otlpHttp }}
      protocol: TCP
    - name: wd-api
      containerPort: {{ $v.ports.api }}
      protocol: TCP
    - name: wd-metrics
      containerPort: {{ $v.ports.metrics }}
      protocol: TCP
    {{- if $v.modelEndpoint.enabled }}
    - name: wd-model
      containerPort: {{ $v.ports.model }}
      protocol: TCP
    {{- end }}
  {{- with $v.probes.startup }}
  {{- if .enabled }}
  # /readyz: receivers and store are up. A native sidecar holds back the agent's containers
  # until this passes, so the agent's first spans find the receivers listening.
  startupProbe:
    httpGet:
      path: /readyz
      port: wd-metrics
    periodSeconds: {{ include "agent-watchdog.envValue" .periodSeconds }}
    timeoutSeconds: {{ include "agent-watchdog.envValue" .timeoutSeconds }}
    failureThreshold: {{ include "agent-watchdog.envValue" .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with $v.probes.liveness }}
  {{- if .enabled }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: wd-metrics
    periodSeconds: {{ include "agent-watchdog.envValue" .periodSeconds }}
    timeoutSeconds: {{ include "agent-watchdog.envValue" .timeoutSeconds }}
    failureThreshold: {{ include "agent-watchdog.envValue" .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with $v.probes.readiness }}
  {{- if .enabled }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: wd-metrics
    periodSeconds: {{ include "agent-watchdog.envValue" .periodSeconds }}
    timeoutSeconds: {{ include "agent-watchdog.envValue" .timeoutSeconds }}
    failureThreshold: {{ include "agent-watchdog.envValue" .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with (ternary $v.sidecar.resources $v.gateway.resources $sidecar) }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: watchdog-state
      mountPath: /var/lib/watchdog
    - name: watchdog-tmp
      mountPath: /tmp
    # A directory mount (no subPath): the kubelet swaps the ConfigMap's files in place and the
    # watchdog reloads the rules within rules.watchInterval, without a restart.
    - name: watchdog-rules
      mountPath: /etc/watchdog/rules
      readOnly: true
{{- end }}

{{/*
The volumes of the watchdog container. Context: as for "agent-watchdog.container".
*/}}
{{- define "agent-watchdog.volumes" -}}
{{- $v := .Values -}}
- name: watchdog-state
  {{- if and (eq .Role "gateway") $v.gateway.persistence.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ $v.gateway.persistence.existingClaim }}
  {{- else }}
  {{- include "agent-watchdog.emptyDir" (dict "medium" $v.state.medium "sizeLimit" $v.state.sizeLimit) | nindent 2 }}
  {{- end }}
- name: watchdog-tmp
  {{- include "agent-watchdog.emptyDir" (dict "sizeLimit" $v.state.tmpSizeLimit) | nindent 2 }}
- name: watchdog-rules
  configMap:
    name: {{ include "agent-watchdog.rulesConfigMapName" . }}
{{- end }}

{{/*
An emptyDir volume source: .medium ("" or Memory) and .sizeLimit, a quantity. A zero one (0, "0",
"0Mi") means no limit, and is left out as Kubernetes reads a limit that is not set; an emptyDir
with neither is written {}, never null (a volume with no source).
*/}}
{{- define "agent-watchdog.emptyDir" -}}
{{- $limit := "" }}
{{- if not (or (kindIs "invalid" .sizeLimit) (regexMatch "^(0+(\\.0*)?|\\.0+)([eE][+-]?[0-9]+)?[A-Za-z]*$" (toString .sizeLimit))) }}
{{- $limit = include "agent-watchdog.envValue" .sizeLimit }}
{{- end }}
{{- if or .medium $limit -}}
emptyDir:
  {{- with .medium }}
  medium: {{ . }}
  {{- end }}
  {{- with $limit }}
  sizeLimit: {{ . }}
  {{- end }}
{{- else -}}
emptyDir: {}
{{- end }}
{{- end }}
