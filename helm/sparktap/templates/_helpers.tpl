{{/*
The environment variable names the sparktap processes read (pydantic-settings, prefix SPARKTAP_, nested delimiter
"__"). This is the ONLY place the chart spells them: adjust here when the settings change.
*/}}
{{- define "sparktap.envNames" -}}
logLevel: SPARKTAP_LOG_LEVEL
home: HOME
kafkaBootstrapServers: SPARKTAP_KAFKA__BOOTSTRAP_SERVERS
kafkaTopic: SPARKTAP_KAFKA__TOPIC
kafkaDlqTopic: SPARKTAP_KAFKA__DLQ_TOPIC
kafkaGroupId: SPARKTAP_KAFKA__GROUP_ID
kafkaSecurityProtocol: SPARKTAP_KAFKA__SECURITY_PROTOCOL
kafkaSaslMechanism: SPARKTAP_KAFKA__SASL_MECHANISM
kafkaSaslUsername: SPARKTAP_KAFKA__SASL_USERNAME
kafkaSaslPassword: SPARKTAP_KAFKA__SASL_PASSWORD
kafkaSslCaLocation: SPARKTAP_KAFKA__SSL_CA_LOCATION
kafkaExtra: SPARKTAP_KAFKA__EXTRA
clickhouseUrl: SPARKTAP_CLICKHOUSE__URL
clickhousePassword: CLICKHOUSE_PASSWORD
clickhouseDatabase: SPARKTAP_CLICKHOUSE__DATABASE
clickhouseCluster: SPARKTAP_CLICKHOUSE__CLUSTER
clickhouseRetentionDays: SPARKTAP_CLICKHOUSE__RETENTION_DAYS
clickhouseReadonlyUser: SPARKTAP_CLICKHOUSE__READONLY_USER
clickhouseReadonlyPassword: SPARKTAP_CLICKHOUSE__READONLY_PASSWORD
clickhouseCaCerts: SPARKTAP_CLICKHOUSE__CA_CERTS
collectorMetricsPort: SPARKTAP_COLLECTOR__METRICS_PORT
collectorMetricsHost: SPARKTAP_COLLECTOR__METRICS_HOST
alertsMetricsPort: SPARKTAP_ALERTS__METRICS_PORT
alertsMetricsHost: SPARKTAP_ALERTS__METRICS_HOST
alertsStatePath: SPARKTAP_ALERTS__STATE_PATH
alertsIntervalSeconds: SPARKTAP_ALERTS__INTERVAL_SECONDS
alertsEventDriven: SPARKTAP_ALERTS__EVENT_DRIVEN
alertsFollowIntervalSeconds: SPARKTAP_ALERTS__FOLLOW_INTERVAL_SECONDS
alertsGrafanaUrl: SPARKTAP_ALERTS__GRAFANA_URL
alertsSlackWebhookUrl: SPARKTAP_ALERTS__SLACK_WEBHOOK_URL
alertsTeamsWebhookUrl: SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL
alertsWebhookUrl: SPARKTAP_ALERTS__WEBHOOK_URL
alertsRoutingPath: SPARKTAP_ALERTS__ROUTING_PATH
{{- end }}

{{/* Where the Kafka TLS Secrets are mounted: the CA, and the client certificate when it is in another Secret. */}}
{{- define "sparktap.kafkaTlsDir" -}}
/etc/sparktap/kafka-tls
{{- end }}

{{- define "sparktap.kafkaClientTlsDir" -}}
{{- if .Values.kafka.tls.clientSecret }}/etc/sparktap/kafka-tls-client{{ else }}{{ include "sparktap.kafkaTlsDir" . }}{{ end }}
{{- end }}

{{- define "sparktap.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name, truncated to leave room for the "-collector" / "-alerter" suffixes. */}}
{{- define "sparktap.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sparktap.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sparktap.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sparktap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sparktap.labels" -}}
helm.sh/chart: {{ include "sparktap.chart" . }}
{{ include "sparktap.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sparktap
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component; call with (dict "root" $ "component" "collector"). */}}
{{- define "sparktap.componentLabels" -}}
{{ include "sparktap.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sparktap.componentSelectorLabels" -}}
{{ include "sparktap.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sparktap.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sparktap.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sparktap.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Secret a reference points at: its own existingSecret, else the release Secret. Call with (list $ name). */}}
{{- define "sparktap.secretName" -}}
{{- $root := index . 0 }}
{{- $existing := index . 1 }}
{{- default (include "sparktap.fullname" $root) $existing }}
{{- end }}

{{/* One env entry read from a Secret. Call with (dict "name" ENV "secret" NAME "key" KEY). */}}
{{- define "sparktap.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}

{{- define "sparktap.kafkaUsesSasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{- define "sparktap.kafkaUsesTls" -}}
{{- if and .Values.kafka.tls.existingSecret (or (eq .Values.kafka.securityProtocol "SSL") (eq .Values.kafka.securityProtocol "SASL_SSL")) }}true{{ end }}
{{- end }}

{{/* Checks that turn inconsistent values into one clear message at render time. */}}
{{- define "sparktap.validate" -}}
{{- if and (include "sparktap.kafkaUsesSasl" .) (not .Values.kafka.sasl.mechanism) }}
{{- fail (printf "kafka.securityProtocol=%s needs kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and (include "sparktap.kafkaUsesSasl" .) (ne .Values.kafka.sasl.mechanism "OAUTHBEARER") (not .Values.kafka.sasl.username) }}
{{- fail (printf "kafka.sasl.mechanism=%s needs kafka.sasl.username (the password comes from the Secret key kafka.sasl.passwordKey)" .Values.kafka.sasl.mechanism) }}
{{- end }}
{{- if and .Values.kafka.tls.existingSecret (not (or (eq .Values.kafka.securityProtocol "SSL") (eq .Values.kafka.securityProtocol "SASL_SSL"))) }}
{{- fail (printf "kafka.tls.existingSecret is set but kafka.securityProtocol=%s does not use TLS; use SSL or SASL_SSL" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and .Values.kafka.tls.clientSecret (not .Values.kafka.tls.existingSecret) }}
{{- fail "kafka.tls.clientSecret needs kafka.tls.existingSecret (the Secret with the broker CA)" }}
{{- end }}
{{- if and .Values.kafka.tls.clientSecret (not .Values.kafka.tls.certKey) }}
{{- fail "kafka.tls.clientSecret is set: also set kafka.tls.certKey and kafka.tls.keyKey" }}
{{- end }}
{{- if ne (empty .Values.kafka.tls.certKey) (empty .Values.kafka.tls.keyKey) }}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey go together (mutual TLS needs both the client certificate and its key)" }}
{{- end }}
{{- if .Values.clickhouse.url }}
{{- $u := urlParse .Values.clickhouse.url }}
{{- if contains ":" $u.userinfo }}
{{- fail "clickhouse.url must not contain a password: put the password under clickhouse.passwordKey of the Secret (or the whole URL under clickhouse.urlKey)" }}
{{- end }}
{{- end }}
{{- if and .Values.alerter.enabled (not (or .Values.alerter.slack.enabled .Values.alerter.teams.enabled .Values.alerter.webhook.enabled .Values.alerter.routing.enabled)) }}
{{- fail "alerter.enabled=true needs at least one notification target: alerter.slack.enabled, alerter.teams.enabled, alerter.webhook.enabled or alerter.routing.enabled" }}
{{- end }}
{{- if and .Values.alerter.routing.enabled (not (or .Values.alerter.routing.config .Values.alerter.routing.existingConfigMap)) }}
{{- fail "alerter.routing.enabled=true needs the routing file: alerter.routing.config (its YAML text) or alerter.routing.existingConfigMap" }}
{{- end }}
{{- if .Values.createSecret }}
{{- $v := .Values.secretValues }}
{{- if and (not .Values.clickhouse.existingSecret) (not .Values.clickhouse.url) (not $v.clickhouseUrl) }}
{{- fail "createSecret=true: set secretValues.clickhouseUrl (or clickhouse.existingSecret)" }}
{{- end }}
{{- if and (not .Values.clickhouse.existingSecret) .Values.clickhouse.url (not $v.clickhousePassword) }}
{{- fail "createSecret=true with clickhouse.url: set secretValues.clickhousePassword (or clickhouse.existingSecret)" }}
{{- end }}
{{- if and (include "sparktap.kafkaUsesSasl" .) (ne .Values.kafka.sasl.mechanism "OAUTHBEARER") (not .Values.kafka.sasl.existingSecret) (not $v.kafkaSaslPassword) }}
{{- fail "createSecret=true with SASL: set secretValues.kafkaSaslPassword (or kafka.sasl.existingSecret)" }}
{{- end }}
{{- if .Values.alerter.enabled }}
{{- if and .Values.alerter.slack.enabled (not .Values.alerter.slack.existingSecret) (not $v.slackWebhookUrl) }}
{{- fail "createSecret=true with alerter.slack.enabled: set secretValues.slackWebhookUrl (or alerter.slack.existingSecret)" }}
{{- end }}
{{- if and .Values.alerter.teams.enabled (not .Values.alerter.teams.existingSecret) (not $v.teamsWebhookUrl) }}
{{- fail "createSecret=true with alerter.teams.enabled: set secretValues.teamsWebhookUrl (or alerter.teams.existingSecret)" }}
{{- end }}
{{- if and .Values.alerter.webhook.enabled (not .Values.alerter.webhook.existingSecret) (not $v.webhookUrl) }}
{{- fail "createSecret=true with alerter.webhook.enabled: set secretValues.webhookUrl (or alerter.webhook.existingSecret)" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Environment shared by both processes: log level, $HOME on the writable /tmp, ClickHouse. */}}
{{- define "sparktap.env.common" -}}
{{- $n := include "sparktap.envNames" . | fromYaml -}}
- name: {{ $n.logLevel }}
  value: {{ .Values.logLevel | quote }}
- name: {{ $n.home }}
  value: /tmp
{{- $secret := include "sparktap.secretName" (list . .Values.clickhouse.existingSecret) }}
{{- if .Values.clickhouse.url }}
{{- /* the password is spliced in by the kubelet ($(VAR) expansion), so the manifest never holds it */}}
{{ include "sparktap.secretEnv" (dict "name" $n.clickhousePassword "secret" $secret "key" .Values.clickhouse.passwordKey) }}
{{- $u := urlParse .Values.clickhouse.url }}
- name: {{ $n.clickhouseUrl }}
  value: {{ printf "%s://%s:$(%s)@%s%s%s" $u.scheme (default "default" $u.userinfo) $n.clickhousePassword $u.host $u.path (ternary (printf "?%s" $u.query) "" (ne $u.query "")) | quote }}
{{- else }}
{{ include "sparktap.secretEnv" (dict "name" $n.clickhouseUrl "secret" $secret "key" .Values.clickhouse.urlKey) }}
{{- end }}
{{- with .Values.clickhouse.database }}
- name: {{ $n.clickhouseDatabase }}
  value: {{ . | quote }}
{{- end }}
{{- with .Values.clickhouse.cluster }}
- name: {{ $n.clickhouseCluster }}
  value: {{ . | quote }}
{{- end }}
- name: {{ $n.clickhouseRetentionDays }}
  value: {{ .Values.clickhouse.retentionDays | int | quote }}
{{- with .Values.clickhouse.readonlyUser }}
- name: {{ $n.clickhouseReadonlyUser }}
  value: {{ . | quote }}
{{ include "sparktap.secretEnv" (dict "name" $n.clickhouseReadonlyPassword "secret" $secret "key" $.Values.clickhouse.readonlyPasswordKey) }}
{{- end }}
{{- with (.Values.clickhouse.tls | default dict) }}
{{- if .existingSecret }}
- name: {{ $n.clickhouseCaCerts }}
  value: {{ printf "/etc/sparktap/clickhouse-tls/%s" (.caKey | default "ca.crt") | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The ClickHouse CA bundle's volume mount and volume (both processes), when clickhouse.tls.existingSecret is set. */}}
{{- define "sparktap.clickhouseTlsMount" -}}
{{- if (.Values.clickhouse.tls | default dict).existingSecret }}
- name: clickhouse-tls
  mountPath: /etc/sparktap/clickhouse-tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "sparktap.clickhouseTlsVolume" -}}
{{- with (.Values.clickhouse.tls | default dict).existingSecret }}
- name: clickhouse-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* Kafka environment of the collector. */}}
{{- define "sparktap.env.kafka" -}}
{{- $n := include "sparktap.envNames" . | fromYaml }}
{{- $k := .Values.kafka -}}
- name: {{ $n.kafkaBootstrapServers }}
  value: {{ $k.bootstrapServers | quote }}
- name: {{ $n.kafkaTopic }}
  value: {{ $k.topic | quote }}
{{- with $k.deadLetterTopic }}
- name: {{ $n.kafkaDlqTopic }}
  value: {{ . | quote }}
{{- end }}
- name: {{ $n.kafkaGroupId }}
  value: {{ $k.groupId | quote }}
- name: {{ $n.kafkaSecurityProtocol }}
  value: {{ $k.securityProtocol | quote }}
{{- if include "sparktap.kafkaUsesSasl" . }}
- name: {{ $n.kafkaSaslMechanism }}
  value: {{ $k.sasl.mechanism | quote }}
{{- if ne $k.sasl.mechanism "OAUTHBEARER" }}
{{- with $k.sasl.username }}
- name: {{ $n.kafkaSaslUsername }}
  value: {{ . | quote }}
{{- end }}
{{ include "sparktap.secretEnv" (dict "name" $n.kafkaSaslPassword "secret" (include "sparktap.secretName" (list . $k.sasl.existingSecret)) "key" $k.sasl.passwordKey) }}
{{- end }}
{{- end }}
{{- $extra := dict }}
{{- range $key, $value := $k.extra }}
{{- $_ := set $extra $key (toString $value) }}
{{- end }}
{{- if include "sparktap.kafkaUsesTls" . }}
- name: {{ $n.kafkaSslCaLocation }}
  value: {{ printf "%s/%s" (include "sparktap.kafkaTlsDir" .) $k.tls.caKey | quote }}
{{- if $k.tls.certKey }}
{{- $_ := set $extra "ssl.certificate.location" (printf "%s/%s" (include "sparktap.kafkaClientTlsDir" .) $k.tls.certKey) }}
{{- $_ := set $extra "ssl.key.location" (printf "%s/%s" (include "sparktap.kafkaClientTlsDir" .) $k.tls.keyKey) }}
{{- end }}
{{- end }}
{{- if $extra }}
- name: {{ $n.kafkaExtra }}
  value: {{ toJson $extra | quote }}
{{- end }}
{{- end }}

{{/* Alerter environment: full-pass interval, event-driven passes (following new parts), Grafana links, one
secretKeyRef per enabled notification target. */}}
{{- define "sparktap.env.alerts" -}}
{{- $n := include "sparktap.envNames" . | fromYaml }}
{{- $a := .Values.alerter -}}
- name: {{ $n.alertsIntervalSeconds }}
  value: {{ $a.intervalSeconds | int | quote }}
- name: {{ $n.alertsEventDriven }}
  value: {{ $a.eventDriven | toString | quote }}
- name: {{ $n.alertsFollowIntervalSeconds }}
  value: {{ $a.followIntervalSeconds | toString | quote }}
{{- with $a.grafanaUrl }}
- name: {{ $n.alertsGrafanaUrl }}
  value: {{ . | quote }}
{{- end }}
{{- if $a.slack.enabled }}
{{ include "sparktap.secretEnv" (dict "name" $n.alertsSlackWebhookUrl "secret" (include "sparktap.secretName" (list . $a.slack.existingSecret)) "key" $a.slack.key) }}
{{- end }}
{{- if $a.teams.enabled }}
{{ include "sparktap.secretEnv" (dict "name" $n.alertsTeamsWebhookUrl "secret" (include "sparktap.secretName" (list . $a.teams.existingSecret)) "key" $a.teams.key) }}
{{- end }}
{{- if $a.webhook.enabled }}
{{ include "sparktap.secretEnv" (dict "name" $n.alertsWebhookUrl "secret" (include "sparktap.secretName" (list . $a.webhook.existingSecret)) "key" $a.webhook.key) }}
{{- end }}
{{- if $a.routing.enabled }}
- name: {{ $n.alertsRoutingPath }}
  value: {{ printf "%s/%s" (include "sparktap.routingDir" .) $a.routing.key | quote }}
{{- range $a.routing.secretEnv }}
{{ include "sparktap.secretEnv" (dict "name" .name "secret" (include "sparktap.secretName" (list $ .secret)) "key" .key) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where the alerter's routing file is mounted (a ConfigMap, read-only). */}}
{{- define "sparktap.routingDir" -}}
/etc/sparktap/routing
{{- end }}

{{- define "sparktap.routingConfigMap" -}}
{{- .Values.alerter.routing.existingConfigMap | default (printf "%s-alerter-routing" (include "sparktap.fullname" .)) }}
{{- end }}

{{/* Pod annotations that roll the pods when the chart-made Secret changes. */}}
{{- define "sparktap.secretChecksum" -}}
{{- if .Values.createSecret }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/*
ConfigMaps for the Grafana sidecar, one per file matching a glob.
Call with (dict "root" $ "glob" "files/dashboards/*.json" "kind" "dashboard" "cfg" .Values.grafana.dashboards).
File contents are copied verbatim (never templated), so Grafana's own {{ $labels.x }} survives.
*/}}
{{- define "sparktap.grafanaConfigMaps" -}}
{{- $root := .root }}
{{- $cfg := .cfg }}
{{- $kind := .kind }}
{{- range $path, $_ := $root.Files.Glob .glob }}
{{- $base := base $path }}
{{- $stem := regexReplaceAll "[^a-z0-9-]+" ($base | trimSuffix (ext $base) | lower) "-" | trimAll "-" }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ printf "%s-%s-%s" (include "sparktap.fullname" $root) $kind $stem | trunc 63 | trimSuffix "-" }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "sparktap.componentLabels" (dict "root" $root "component" "grafana") | nindent 4 }}
    {{ $cfg.label }}: {{ $cfg.labelValue | quote }}
  {{- with $cfg.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
data:
  {{- ($root.Files.Glob $path).AsConfig | nindent 2 }}
{{- end }}
{{- end }}

{{/* Probes on /healthz of the "metrics" port; call with the component's probe values. */}}
{{/* An HTTP probe on the "metrics" port: (dict "path" "/healthz" "probe" <timings>). */}}
{{- define "sparktap.probe" -}}
httpGet:
  path: {{ .path }}
  port: metrics
{{- toYaml .probe | nindent 0 }}
{{- end }}

{{/* Where the alerter keeps its state (open findings, what was sent): on the PVC when persistence is on. */}}
{{- define "sparktap.alerterStateDir" -}}
/var/lib/sparktap
{{- end }}

{{/* Where the follower sees the event log directory (read-only) and keeps its checkpoint. */}}
{{- define "sparktap.followerLogDir" -}}
/var/log/spark-events
{{- end }}

{{- define "sparktap.followerCheckpointDir" -}}
/var/lib/sparktap
{{- end }}
