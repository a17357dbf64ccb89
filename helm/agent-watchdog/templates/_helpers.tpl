{{/*
Names and labels.

The helpers below take a root-like context: .Values (this chart's values), .Release and, for
labels, .Chart. The sidecar templates (_sidecar.tpl) are also included from an agent's own chart,
where .Chart is that chart: so names are derived from the literal chart name
"agent-watchdog" (not .Chart.Name, which an alias would change) and the default image tag from
"agent-watchdog.appVersion" (kept equal to Chart.yaml's appVersion by the tests). A parent chart
and this chart thus agree on the names of the rules ConfigMap and the Secret.
*/}}

{{- define "agent-watchdog.appVersion" -}}0.2.0{{- end }}

{{- define "agent-watchdog.name" -}}
{{- default "agent-watchdog" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name: the release name, suffixed with the chart name unless it already holds it.
Truncated to 63 characters (a DNS label); suffixed names (-rules, -headless) trim it further.
*/}}
{{- define "agent-watchdog.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "agent-watchdog.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agent-watchdog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-watchdog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-watchdog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "agent-watchdog.labels" -}}
helm.sh/chart: {{ include "agent-watchdog.chart" . }}
{{ include "agent-watchdog.selectorLabels" . }}
app.kubernetes.io/version: {{ include "agent-watchdog.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agent-watchdog
{{- end }}

{{- define "agent-watchdog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agent-watchdog.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "agent-watchdog.rulesConfigMapName" -}}
{{- if .Values.rules.existingConfigMap }}
{{- .Values.rules.existingConfigMap }}
{{- else }}
{{- printf "%s-rules" (include "agent-watchdog.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/* The Secret this chart creates (auth.token, webhooks); see "agent-watchdog.createSecret". */}}
{{- define "agent-watchdog.secretName" -}}
{{- include "agent-watchdog.fullname" . }}
{{- end }}

{{- define "agent-watchdog.createSecret" -}}
{{- if or (and .Values.auth.token (not .Values.auth.existingSecret)) .Values.webhooks }}true{{ end }}
{{- end }}

{{/* The Secret and key holding the API token, or "" when none is configured. */}}
{{- define "agent-watchdog.tokenSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if .Values.auth.token }}
{{- include "agent-watchdog.secretName" . }}
{{- end }}
{{- end }}

{{- define "agent-watchdog.imageTag" -}}
{{- .Values.image.tag | default (include "agent-watchdog.appVersion" .) | toString }}
{{- end }}

{{- define "agent-watchdog.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "agent-watchdog.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
A values scalar as an env var value or a quantity (a volume's size), a number as written: Helm
reads numbers as float64, which prints 16777216 as 1.6777216e+07 and 0.0000001 as 1e-07 (a form
the watchdog does not read). Whole numbers print as their digits (any size); others as the
fewest decimals that read back as the same number, never with an exponent.
*/}}
{{- define "agent-watchdog.envValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}
{{- printf "%.0f" . }}
{{- else if kindIs "float64" . }}
{{- $number := . }}
{{- $text := "" }}
{{- range $decimals := until 340 }}
{{- $try := printf "%.*f" (add1 $decimals) $number }}
{{- if and (not $text) (eq (float64 $try) $number) }}{{ $text = $try }}{{ end }}
{{- end }}
{{- $text | default (toString $number) }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/* "sha256 of what this chart puts in its Secret": a change must restart the pods using it. */}}
{{- define "agent-watchdog.secretChecksum" -}}
{{- dict "token" .Values.auth.token "webhooks" .Values.webhooks "existingSecret" .Values.auth.existingSecret | toJson | sha256sum }}
{{- end }}

{{/*
Refusals: values that cannot work are stopped at render time with a message naming the key.
*/}}
{{- define "agent-watchdog.validate" -}}
{{- if and (eq .Values.mode "gateway") (not .Values.auth.existingSecret) (not .Values.auth.token) }}
{{- fail "mode=gateway binds the OTLP receivers and the control API to all interfaces and needs a token: set auth.existingSecret (a Secret with key auth.existingSecretKey, default api-token) or auth.token" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (ne .Values.mode "gateway") }}
{{- fail "serviceMonitor.enabled needs mode=gateway (a sidecar has no Service): use podMonitor.enabled to scrape the sidecars in the agent pods" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled would scrape the gateway twice (and double every alert's counts): enable one of them" }}
{{- end }}
{{- if and .Values.forward.headersSecret.name (not .Values.forward.endpoint) }}
{{- fail "forward.headersSecret is set but forward.endpoint is not: set forward.endpoint (e.g. http://otel-collector:4318) or remove the headers" }}
{{- end }}
{{- if and (eq .Values.mode "gateway") .Values.gateway.collector.enabled (not .Values.gateway.headlessService) }}
{{- fail "gateway.collector.enabled resolves the replicas through the headless Service: set gateway.headlessService=true" }}
{{- end }}
{{- if and .Values.gateway.persistence.existingClaim (gt (int .Values.gateway.replicas) 1) }}
{{- fail "gateway.persistence.existingClaim holds one replica's state: set gateway.replicas=1 (each replica needs a volume of its own)" }}
{{- end }}
{{- /* Kubernetes kills the gateway terminationGracePeriodSeconds after its SIGTERM: the model requests in flight get model_shutdown_grace first (config.py's duration grammar). */}}
{{- /* Unset, the grace is the watchdog's default (config.py's DEFAULT_MODEL_SHUTDOWN_GRACE). */}}
{{- $grace := get (.Values.config | default dict) "model_shutdown_grace" }}
{{- $unset := or (kindIs "invalid" $grace) (eq (toString $grace) "") }}
{{- if eq .Values.mode "gateway" }}
{{- $text := ternary "20s" (toString $grace | trim) $unset }}
{{- $seconds := 0.0 }}
{{- if regexMatch "^[+-]?[0-9]+(\\.[0-9]+)?$" $text }}
{{- $seconds = float64 $text }}
{{- else }}
{{- $units := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 "w" 604800.0 "y" 31536000.0 }}
{{- range regexFindAll "[0-9]+(ms|[ywdhms])" $text -1 }}
{{- $seconds = addf $seconds (mulf (float64 (regexFind "^[0-9]+" .)) (get $units (regexReplaceAll "^[0-9]+" . ""))) }}
{{- end }}
{{- end }}
{{- if gt (addf $seconds 10.0) (float64 .Values.gateway.terminationGracePeriodSeconds) }}
{{- fail (printf "config.model_shutdown_grace=%s%s leaves less than 10 s of gateway.terminationGracePeriodSeconds=%v: at a SIGTERM the gRPC receiver's stop (up to 5 s) comes before the model requests in flight get their grace, and the state's last flush after them; Kubernetes would kill the gateway first. Raise terminationGracePeriodSeconds to the grace and 10 s more, or lower the grace" $text (ternary " (the default)" "" $unset) .Values.gateway.terminationGracePeriodSeconds) }}
{{- end }}
{{- end }}
{{- /* The listeners share one network namespace (the pod): the watchdog refuses two on one port. */}}
{{- $listeners := list (list "ports.otlpGrpc" .Values.ports.otlpGrpc) (list "ports.otlpHttp" .Values.ports.otlpHttp) (list "ports.api" .Values.ports.api) (list "ports.metrics" .Values.ports.metrics) }}
{{- if .Values.modelEndpoint.enabled }}
{{- $listeners = append $listeners (list "ports.model" .Values.ports.model) }}
{{- end }}
{{- $taken := dict }}
{{- range $listeners }}
{{- $port := include "agent-watchdog.envValue" (index . 1) }}
{{- if hasKey $taken $port }}
{{- fail (printf "%s=%s is the port of %s too: give each listener a port of its own" (index . 0) $port (get $taken $port)) }}
{{- end }}
{{- $_ := set $taken $port (index . 0) }}
{{- end }}
{{- /* Webhooks as the watchdog reads them (config.py), never showing a URL or a secret (either may hold a credential). */}}
{{- range $index, $hook := .Values.webhooks }}
{{- if not (regexMatch "^https?://[^/?#:@]+" ($hook.url | toString)) }}
{{- fail (printf "webhooks[%d].url (hidden) is not allowed: expected an http:// or https:// URL with a host" $index) }}
{{- end }}
{{- $secret := $hook.secret | toString }}
{{- if and (not (hasPrefix "whsec_" $secret)) (lt (len $secret) 16) }}
{{- fail (printf "webhooks[%d].secret (hidden, %d characters) is not allowed: expected 'whsec_<base64>' (Standard Webhooks) or a string of at least 16 characters" $index (len $secret)) }}
{{- end }}
{{- end }}
{{- /* A gateway's token guards listeners on every interface: the watchdog's rules for it (config.py). */}}
{{- if and (eq .Values.mode "gateway") .Values.auth.token }}
{{- $token := trim .Values.auth.token }}
{{- if regexMatch "[[:space:][:cntrl:]]" $token }}
{{- fail "auth.token holds whitespace or a control character inside: a token is one word of printable characters (e.g. openssl rand -hex 32)" }}
{{- end }}
{{- if lt (len $token) 16 }}
{{- fail (printf "auth.token is %d characters: a gateway's token (its listeners are on every interface) needs at least 16 (e.g. openssl rand -hex 32)" (len $token)) }}
{{- end }}
{{- end }}
{{- end }}
