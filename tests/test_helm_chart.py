"""The Helm chart (helm/agent-watchdog), rendered offline by the Helm v4 library that
helm-python-sdk ships (no helm binary, no cluster).

Every mode's manifests pass ``kubernetes-validate --strict`` for Kubernetes 1.29 (the first with
native sidecars) and the newest version it has schemas for; the Prometheus Operator's kinds,
which it has no schemas for, are checked against the subset of their CRD schemas the chart uses.
The sidecar's rendered env is fed to the real watchdog: its config accepts it, and a real
process reloads its rules when the ConfigMap directory is swapped the way the kubelet does it.

Every test runs on the chart directory and on the chart package that `make dist` writes
(dist/agent-watchdog-VERSION.tgz: loaded as the archive; its files, where a test reads them,
from the archive expanded; the example agent chart gets it in charts/, as `helm dependency
update` puts it there).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tests.harness import wait_until
from tests.ports import free_port
from tests.test_dist import packaged_chart
from tests.test_startup import service_links
from watchdog.shell.config import (
    INT_MAXIMUMS,
    MAX_SECONDS,
    SECONDS_ALLOWED,
    SECONDS_MAXIMUMS,
    Config,
    ConfigError,
    load,
)
from watchdog.shell.server import SHUTDOWN_GRACE

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "agent-watchdog"
EXAMPLE = CHART / "examples" / "my-agent"
K8S_VERSIONS = ("1.29.0", latest_version())
RELEASE, NAMESPACE = "rel", "agents"
FULLNAME = "rel-agent-watchdog"
WATCHDOG_UID = 65532
TOKEN_SECRET = "agents-watchdog-token"
RUNBOOK_URL = "https://git.example.com/platform/agent-watchdog/blob/v0.1.0/docs/alerts.md"

# Every mode the chart has, by name: the values a user would pass.
MODES: dict[str, dict[str, Any] | None] = {
    "default": None,
    "sidecar-plain": {"sidecar": {"native": False}},
    "sidecar-monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                           "runbookUrl": "https://wiki.example.com/agent-watchdog/alerts",
                           "additionalRuleLabels": {"team": "platform"},
                           "disabled": {"AgentWatchdogWebhookRetrying": True},
                           "customRules": {"AgentWatchdogRunIdle": {"for": "5m",
                                                                    "severity": "critical"}}},
        "dashboards": {"enabled": True, "annotations": {"grafana_folder": "Agents"}},
        "auth": {"token": "a-token-of-at-least-16-chars"},
        "webhooks": [{"url": "https://hooks.example.com/w", "secret": "0123456789abcdef0123",
                      "actions": ["abort"]}],
        "rules": {"packs": {"team": "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: team\n"}},
        "config": {"log_level": "debug", "max_request_bytes": 16777216, "eval_interval": 0.5,
                   "run_end_timeout": "10m"},
    },
    "gateway": {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET}},
    "gateway-monitoring": {
        "mode": "gateway", "auth": {"token": "a-token-of-at-least-16-chars"},
        "gateway": {"replicas": 3, "podDisruptionBudget": {"enabled": True},
                    "affinity": {"podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100, "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {
                                    "app.kubernetes.io/name": "agent-watchdog"}}}}]}}},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "runbookUrl": RUNBOOK_URL},
        "dashboards": {"enabled": True},
    },
    "gateway-collector": {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET},
                          "gateway": {"replicas": 3, "collector": {"enabled": True}}},
    "gateway-persistent": {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET},
                           "gateway": {"persistence": {"existingClaim": "watchdog-state"}},
                           "podMonitor": {"enabled": True}},
}
OPERATOR_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}


# -- rendering ------------------------------------------------------------------------------

Manifest = dict[str, Any]


@dataclass(frozen=True)
class ChartSource:
    directory: Path  # the chart's files: the repository's, or the package's expanded
    archive: Path | None  # the package, when testing the package

    @property
    def loadable(self) -> Path:
        return self.archive or self.directory


@pytest.fixture(scope="module", params=["directory", "package"])
def source(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> ChartSource:
    if request.param == "directory":
        return ChartSource(CHART, None)
    archive = packaged_chart()
    expanded = tmp_path_factory.mktemp("package")
    helm.expand(expanded, archive)
    return ChartSource(expanded / CHART.name, archive)


@pytest.fixture(scope="module")
def chart(source: ChartSource) -> Iterator[helm.Chart]:
    with helm.Chart.load(source.loadable) as loaded:
        yield loaded


def render_files(chart: helm.Chart, values: dict[str, Any] | None = None) -> dict[str, str]:
    return chart.render(copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE)


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[Manifest]:
    manifests: list[Manifest] = []
    for path, text in sorted(render_files(chart, values).items()):
        if path.endswith("NOTES.txt"):
            continue
        manifests.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return manifests


def kinds(manifests: list[Manifest]) -> list[str]:
    return sorted(f"{m['kind']}/{m['metadata']['name']}" for m in manifests)


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests
             if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, kinds(manifests))
    return found[0]


def pod_spec(manifest: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]
    return spec if manifest["kind"] == "Pod" else spec["template"]["spec"]


def watchdog_containers(manifests: list[Manifest]) -> list[dict[str, Any]]:
    """Every watchdog container (sidecar or gateway) in the pods and pod templates."""
    found = []
    for manifest in manifests:
        if manifest["kind"] not in ("Pod", "Deployment"):
            continue
        spec = pod_spec(manifest)
        for container in spec.get("initContainers", []) + spec["containers"]:
            if "agent-watchdog" in container["image"]:
                found.append(container)
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.fixture(scope="module")
def example_chart(source: ChartSource,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[helm.Chart]:
    """examples/my-agent with its dependency built, as `helm dependency update` would: from
    the chart directory (file://../..), or the package in its charts/."""
    work = tmp_path_factory.mktemp("example")
    if source.archive is None:
        shutil.copytree(CHART, work / "agent-watchdog")
        example = work / "agent-watchdog" / "examples" / "my-agent"
        helm.dependency_update(example, skip_refresh=True)  # file://../.. : the copy above
    else:
        example = work / "my-agent"
        shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
        (example / "charts").mkdir()
        shutil.copy(source.archive, example / "charts" / source.archive.name)
    with helm.Chart.load(example) as loaded:
        yield loaded


def render_example(example_chart: helm.Chart,
                   watchdog: dict[str, Any] | None = None) -> list[Manifest]:
    values = {"watchdog": watchdog} if watchdog else None
    rendered = example_chart.render(values, name="my-agent", namespace=NAMESPACE)
    return [doc for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


# -- validation -----------------------------------------------------------------------------

_PROM_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)(y|w|d|h|m|s|ms))+)$"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": _STRING_MAP,
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["key", "operator"],
        "properties": {"key": {"type": "string"}, "operator": {"type": "string"},
                       "values": {"type": "array", "items": {"type": "string"}}}}}}}
_ENDPOINT = {"type": "object", "additionalProperties": False, "required": ["port"], "properties": {
    "port": {"type": "string", "minLength": 1}, "path": {"type": "string", "pattern": "^/"},
    "interval": _PROM_DURATION, "scrapeTimeout": _PROM_DURATION,
    "relabelings": {"type": "array", "items": {"type": "object"}},
    "metricRelabelings": {"type": "array", "items": {"type": "object"}}}}
_METADATA = {"type": "object", "required": ["name", "namespace", "labels"], "properties": {
    "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
    "namespace": {"type": "string"}, "labels": _STRING_MAP, "annotations": _STRING_MAP}}
_RULE = {"type": "object", "additionalProperties": False, "required": ["expr"],
         "oneOf": [{"required": ["alert"]}, {"required": ["record"]}], "properties": {
             "alert": {"type": "string", "minLength": 1},
             "record": {"type": "string", "minLength": 1},
             "expr": {"type": "string", "minLength": 1}, "for": _PROM_DURATION,
             "keep_firing_for": _PROM_DURATION, "labels": _STRING_MAP,
             "annotations": _STRING_MAP}}


def _operator_kind(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False,
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": "monitoring.coreos.com/v1"},
                           "kind": {"type": "string"}, "metadata": _METADATA, "spec": spec}}


# The parts of the Prometheus Operator's CRD schemas (monitoring.coreos.com/v1) the chart uses,
# strict: kubernetes-validate has no schemas for custom resources.
OPERATOR_SCHEMAS: dict[str, dict[str, Any]] = {
    "PodMonitor": _operator_kind({
        "type": "object", "additionalProperties": False,
        "required": ["selector", "podMetricsEndpoints"], "properties": {
            "selector": _LABEL_SELECTOR,
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "any": {"type": "boolean"},
                "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}}),
    "ServiceMonitor": _operator_kind({
        "type": "object", "additionalProperties": False, "required": ["selector", "endpoints"],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "any": {"type": "boolean"},
                "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}}),
    "PrometheusRule": _operator_kind({
        "type": "object", "additionalProperties": False, "required": ["groups"], "properties": {
            "groups": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["name", "rules"],
                "properties": {"name": {"type": "string", "minLength": 1},
                               "interval": _PROM_DURATION, "limit": {"type": "integer"},
                               "rules": {"type": "array", "items": _RULE}}}}}}),
}


def validate(manifests: list[Manifest]) -> None:
    """kubernetes-validate --strict for both versions; the operator's kinds by OPERATOR_SCHEMAS."""
    for manifest in manifests:
        kind = manifest["kind"]
        where = f"{kind}/{manifest['metadata']['name']}"
        if kind in OPERATOR_KINDS:
            jsonschema.validate(manifest, OPERATOR_SCHEMAS[kind])
            if kind == "PrometheusRule":
                names = [group["name"] for group in manifest["spec"]["groups"]]
                assert len(names) == len(set(names)), f"{where}: duplicate group names {names}"
            continue
        for version in K8S_VERSIONS:
            problem = None
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                problem = f"{where} is not valid for Kubernetes {version}: {path}: {exc.message}"
            if problem:
                pytest.fail(problem)


# -- every mode: valid manifests, the expected resources ------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_valid_manifests(chart: helm.Chart, mode: str) -> None:
    manifests = render(chart, MODES[mode])
    assert manifests
    validate(manifests)
    for manifest in manifests:
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "agent-watchdog"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "agent-watchdog-0.1.0"
        assert manifest["metadata"]["namespace"] == NAMESPACE


def test_default_values_render_what_the_sidecars_share(chart: helm.Chart) -> None:
    """Sidecar mode on its own renders the rules ConfigMap and the test pod: no workload (the
    sidecars live in the agents' pods), no Secret without a token, no ServiceAccount."""
    manifests = render(chart)
    assert kinds(manifests) == [f"ConfigMap/{FULLNAME}-rules", f"Pod/{FULLNAME}-test"]
    assert one(manifests, "ConfigMap")["data"] == {}
    test_pod = one(manifests, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # The test pod runs the sidecar as the agents will, and curls its /readyz.
    [sidecar] = test_pod["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    [curl] = test_pod["spec"]["containers"]
    assert curl["args"][-1] == "http://127.0.0.1:9464/readyz"


def test_sidecar_plain_has_no_test_pod(chart: helm.Chart) -> None:
    # A plain sidecar container would keep a test pod running forever.
    assert kinds(render(chart, MODES["sidecar-plain"])) == [f"ConfigMap/{FULLNAME}-rules"]


def test_gateway_renders_a_deployment_and_services(chart: helm.Chart) -> None:
    manifests = render(chart, MODES["gateway"])
    assert kinds(manifests) == [
        f"ConfigMap/{FULLNAME}-rules", f"Deployment/{FULLNAME}", f"Pod/{FULLNAME}-test",
        f"Service/{FULLNAME}", f"Service/{FULLNAME}-headless", f"ServiceAccount/{FULLNAME}"]
    deployment = one(manifests, "Deployment")
    spec = pod_spec(deployment)
    assert spec["serviceAccountName"] == FULLNAME
    assert spec["automountServiceAccountToken"] is False
    [container] = spec["containers"]
    assert "initContainers" not in spec and "restartPolicy" not in container
    env = env_of(container)
    for key, port in (("OTLP_GRPC", 4317), ("OTLP_HTTP", 4318), ("API", 9477), ("METRICS", 9464)):
        assert env[f"WATCHDOG_{key}_ADDRESS"] == f"0.0.0.0:{port}"
    assert env["WATCHDOG_API_TOKEN"] == {
        "secretKeyRef": {"name": TOKEN_SECRET, "key": "api-token"}}
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for service in (one(manifests, "Service", FULLNAME),
                    one(manifests, "Service", f"{FULLNAME}-headless")):
        ports = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
        # the model endpoint (9478, tests/test_helm_model_endpoint.py) is not for the Collector
        headless = service["metadata"]["name"].endswith("-headless")
        assert sorted(ports) == [4317, 4318, 9464, 9477] + ([] if headless else [9478])
        assert all(container_ports[target] == port for port, target in ports.items())
        selector = service["spec"]["selector"]
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert one(manifests, "Service", f"{FULLNAME}-headless")["spec"]["clusterIP"] == "None"
    test_pod = one(manifests, "Pod")
    assert test_pod["spec"]["containers"][0]["args"][-1] == f"http://{FULLNAME}:9464/readyz"


def test_gateway_monitoring_selects_only_the_cluster_ip_service(chart: helm.Chart) -> None:
    manifests = render(chart, MODES["gateway-monitoring"])
    assert one(manifests, "Deployment")["spec"]["replicas"] == 3
    assert one(manifests, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    monitor = one(manifests, "ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = [s["metadata"]["name"] for s in manifests if s["kind"] == "Service"
                and wanted.items() <= s["metadata"]["labels"].items()]
    assert selected == [FULLNAME]  # not the headless one too: no double scrape
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # The alert rules find the watchdog's scrape job by "agent-watchdog" in its name.
    assert "agent-watchdog" in monitor["metadata"]["name"]


def test_gateway_with_a_claim_recreates_and_mounts_it(chart: helm.Chart) -> None:
    manifests = render(chart, MODES["gateway-persistent"])
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    assert volumes["watchdog-state"]["persistentVolumeClaim"] == {"claimName": "watchdog-state"}
    monitor = one(manifests, "PodMonitor")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


# -- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize(("values", "named"), [
    ({"sidcar": {"native": False}}, "sidcar"),
    ({"sidecar": {"natve": False}}, "natve"),
    ({"gateway": {"replica": 2}}, "replica"),
    ({"config": {"log_levl": "debug"}}, "log_levl"),
    ({"podMonitor": {"enabled": True, "intervall": "15s"}}, "intervall"),
])
def test_a_typo_in_values_is_refused_by_name(chart: helm.Chart, values: dict[str, Any],
                                             named: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, values)
    assert f"'{named}' not allowed" in str(refused.value)


@pytest.mark.parametrize(("values", "where"), [
    ({"mode": "daemonset"}, "/mode"),
    ({"ports": {"api": "9477"}}, "/ports/api"),
    ({"config": {"log_level": "loud"}}, "/config/log_level"),
    ({"config": {"run_end_timeout": "15 minutes"}}, "/config/run_end_timeout"),
    # (a duration the sidecar wants positive: a zero one or none would crash-loop the pod)
    ({"config": {"run_end_timeout": "0s"}}, "/config/run_end_timeout"),
    ({"config": {"eval_interval": "00"}}, "/config/eval_interval"),
    ({"config": {"fleet_window": " "}}, "/config/fleet_window"),
    ({"config": {"state_flush_interval": "0ms"}}, "/config/state_flush_interval"),
    ({"config": {"max_runs": 0}}, "/config/max_runs"),
    ({"image": {"digest": "latest"}}, "/image/digest"),
    ({"modelEndpoint": {"upstreamAnthropic": "https://api.anthropic.com/v1"}},
     "/modelEndpoint/upstreamAnthropic"),
])
def test_a_bad_value_is_refused_with_its_path(chart: helm.Chart, values: dict[str, Any],
                                              where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, values)
    assert where in str(refused.value)


def test_gateway_without_a_token_fails_to_render(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(chart, {"mode": "gateway"})
    message = str(refused.value)
    assert "mode=gateway" in message and "auth.existingSecret" in message
    assert "auth.token" in message


@pytest.mark.parametrize(("values", "says"), [
    ({"serviceMonitor": {"enabled": True}}, "use podMonitor.enabled"),
    ({"mode": "gateway", "auth": {"token": "t" * 20}, "serviceMonitor": {"enabled": True},
      "podMonitor": {"enabled": True}}, "enable one of them"),
    ({"mode": "gateway", "auth": {"token": "t" * 20},
      "gateway": {"replicas": 2, "persistence": {"existingClaim": "c"}}}, "gateway.replicas=1"),
    # What the watchdog would refuse at start (a pod in a crash loop), refused by the render:
    # two listeners on one port, in either mode, the model endpoint's too while it is on
    ({"ports": {"otlpHttp": 9477}},
     "ports.api=9477 is the port of ports.otlpHttp too: give each listener a port of its own"),
    ({"mode": "gateway", "auth": {"token": "t" * 20}, "ports": {"model": 9464}},
     "ports.model=9464 is the port of ports.metrics too"),
    # a gateway's token: 16 characters at least, one word (whitespace around is dropped)
    ({"mode": "gateway", "auth": {"token": "short-token\n"}},
     "auth.token is 11 characters: a gateway's token (its listeners are on every interface) "
     "needs at least 16"),
    ({"mode": "gateway", "auth": {"token": "a token of sixteen chars"}},
     "auth.token holds whitespace or a control character inside"),
    # a webhook's URL and secret, never shown (either may hold a credential)
    ({"webhooks": [{"url": "ftp://hooks.example/in-secret-path", "secret": "s" * 16}]},
     "webhooks[0].url (hidden) is not allowed: expected an http:// or https:// URL with a host"),
    ({"webhooks": [{"url": "https://hooks.example/in", "secret": "s" * 16},
                   {"url": "https://hooks.example/in", "secret": "short-secret"}]},
     "webhooks[1].secret (hidden, 12 characters) is not allowed"),
])
def test_values_that_cannot_work_fail_with_the_key(chart: helm.Chart, values: dict[str, Any],
                                                   says: str) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(chart, values)
    assert says in str(refused.value)
    assert "in-secret-path" not in str(refused.value) and "short-secret" not in str(refused.value)


def test_what_the_watchdog_takes_renders(chart: helm.Chart) -> None:
    """The other side of the checks above: the model port is free while the endpoint is off, a
    token with a Secret file's newline is the token, a Standard Webhooks secret is short."""
    render(chart, {"ports": {"model": 9464}, "modelEndpoint": {"enabled": False}})
    render(chart, {"mode": "gateway", "auth": {"token": "t" * 16 + "\n"},
                   "webhooks": [{"url": "https://hooks.example/in", "secret": "whsec_AAAA"}]})


def test_the_schema_refuses_unknown_keys_everywhere(source: ChartSource) -> None:
    """additionalProperties: false on every object of values.schema.json, except `global`
    (Helm's, the parent chart's) and maps whose values are typed (labels, annotations, packs,
    resource quantities) or Kubernetes objects passed through (affinity terms)."""
    schema = json.loads((source.directory / "values.schema.json").read_text())
    passthrough = {"global", "nodeAffinity", "podAffinity", "podAntiAffinity"}
    loose: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object":
            extra = node.get("additionalProperties", True)
            if extra is True and path.rsplit(".", 1)[-1] not in passthrough:
                loose.append(path)
            if isinstance(extra, dict):
                walk(extra, path + ".*")
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        for key in ("items", "anyOf"):
            children = node.get(key, [])
            for child in children if isinstance(children, list) else [children]:
                walk(child, path + "[]")

    walk(schema, "$")
    assert loose == []


def test_the_schema_bounds_the_integer_keys_as_the_sidecar_does(source: ChartSource) -> None:
    """A value the sidecar would refuse at start is refused by `helm install` already: an
    integer, or a time given as a number of seconds."""
    schema = json.loads((source.directory / "values.schema.json").read_text())
    found: dict[str, int] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, child in node.get("properties", {}).items():
                name = {"maxEndedRuns": "state_max_ended_runs"}.get(name, name)  # (state.)
                if name in INT_MAXIMUMS and isinstance(child, dict):
                    found[name] = child.get("maximum")
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    assert found == INT_MAXIMUMS
    times = schema["properties"]["config"]["properties"]
    assert {key: times[key]["anyOf"][0]["maximum"] for key in SECONDS_ALLOWED if key in times} \
        == {key: SECONDS_MAXIMUMS.get(key, MAX_SECONDS) for key in SECONDS_ALLOWED
            if key != "rules_watch_interval"}


# -- the sidecar: named templates in an agent's own chart ----------------------------------

def test_example_agent_gets_a_native_sidecar(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart)
    validate(manifests)
    deployment = one(manifests, "Deployment", "my-agent")
    spec = pod_spec(deployment)
    [sidecar] = spec["initContainers"]
    assert sidecar["name"] == "watchdog" and sidecar["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    agent_env = env_of(spec["containers"][0])
    assert agent_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    assert agent_env["WATCHDOG_URL"] == "http://127.0.0.1:9477"
    assert "WATCHDOG_API_TOKEN" not in agent_env  # loopback only: no token needed
    # Its volumes refer to the ConfigMap the dependency rendered in the same release.
    volumes = {v["name"]: v for v in spec["volumes"]}
    rules = one(manifests, "ConfigMap", "my-agent-agent-watchdog-rules")
    assert volumes["watchdog-rules"]["configMap"]["name"] == rules["metadata"]["name"]
    assert "my-agent.yaml" in rules["data"]
    assert {m["name"] for m in sidecar["volumeMounts"]} <= volumes.keys()
    # The dependency's PodMonitor selects this pod.
    monitor = one(manifests, "PodMonitor")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"] for p in sidecar["ports"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports


def render_for_kubernetes(chart: helm.Chart, values: dict[str, Any] | None,
                          version: str) -> dict[str, str]:
    """Render as for a cluster of ``version`` (helm template --kube-version). Chart.render of
    helm-python-sdk 0.2.2 does not expose the option its library takes, hence _native."""
    from helm_python import _native

    rendered = _native.call_string("helm_render", chart._raw(), json.dumps(values),
                                   json.dumps({"name": "my-agent", "namespace": NAMESPACE,
                                               "kube_version": version}))
    files: dict[str, str] = json.loads(rendered)
    return files


def test_a_native_sidecar_is_refused_before_kubernetes_1_29(example_chart: helm.Chart) -> None:
    assert "restartPolicy: Always" in render_for_kubernetes(
        example_chart, None, "v1.29.0")["my-agent/templates/deployment.yaml"]
    with pytest.raises(helm.HelmRenderError, match=r"set sidecar\.native=false"):
        render_for_kubernetes(example_chart, None, "v1.28.9")
    older = render_for_kubernetes(example_chart, {"watchdog": {"sidecar": {"native": False}}},
                                  "v1.25.0")["my-agent/templates/deployment.yaml"]
    assert "restartPolicy" not in older


def test_example_agent_on_an_older_cluster_gets_a_plain_sidecar(
        example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"sidecar": {"native": False}})
    validate(manifests)
    spec = pod_spec(one(manifests, "Deployment", "my-agent"))
    assert "initContainers" not in spec
    names = [c["name"] for c in spec["containers"]]
    assert names == ["agent", "watchdog"]
    assert "restartPolicy" not in spec["containers"][1]


def test_example_agent_with_a_token_sends_it(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"auth": {"existingSecret": TOKEN_SECRET}})
    validate(manifests)
    spec = pod_spec(one(manifests, "Deployment", "my-agent"))
    secret_ref = {"secretKeyRef": {"name": TOKEN_SECRET, "key": "api-token"}}
    assert env_of(spec["initContainers"][0])["WATCHDOG_API_TOKEN"] == secret_ref
    agent_env = spec["containers"][0]["env"]
    names = [e["name"] for e in agent_env]
    # $(WATCHDOG_API_TOKEN) expands only when the variable is defined earlier in the list.
    assert names.index("WATCHDOG_API_TOKEN") < names.index("OTEL_EXPORTER_OTLP_HEADERS")
    assert env_of(spec["containers"][0])["OTEL_EXPORTER_OTLP_HEADERS"] == (
        "Authorization=Bearer%20$(WATCHDOG_API_TOKEN)")


def test_agent_env_points_at_the_gateway_in_gateway_mode(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart,
                               {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET}})
    validate(manifests)
    service = one(manifests, "Service", "my-agent-agent-watchdog")["metadata"]["name"]
    env = env_of(pod_spec(one(manifests, "Deployment", "my-agent"))["containers"][0])
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{service}.{NAMESPACE}.svc:4318"
    assert env["WATCHDOG_URL"] == f"http://{service}.{NAMESPACE}.svc:9477"


# -- security, probes, rules reload --------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_restricted_security_context(chart: helm.Chart, mode: str) -> None:
    manifests = render(chart, MODES[mode])
    containers = watchdog_containers(manifests)
    if mode != "sidecar-plain":
        assert containers
    for container in containers:
        assert container["securityContext"] == {
            "runAsNonRoot": True, "runAsUser": WATCHDOG_UID, "runAsGroup": WATCHDOG_UID,
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
        # The only writable paths, given a read-only root: state and /tmp, both volumes.
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert set(mounts) == {"/var/lib/watchdog", "/tmp", "/etc/watchdog/rules"}
        assert mounts["/etc/watchdog/rules"]["readOnly"] is True
        assert env_of(container)["WATCHDOG_STATE_DIR"] == "/var/lib/watchdog"
        probes = {name: container[name]["httpGet"] for name in
                  ("startupProbe", "livenessProbe", "readinessProbe")}
        assert probes == {"startupProbe": {"path": "/readyz", "port": "wd-metrics"},
                          "livenessProbe": {"path": "/healthz", "port": "wd-metrics"},
                          "readinessProbe": {"path": "/readyz", "port": "wd-metrics"}}
    for manifest in manifests:
        if manifest["kind"] in ("Pod", "Deployment"):
            pod_context = pod_spec(manifest)["securityContext"]
            assert pod_context["runAsNonRoot"] is True
            assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_rules_are_a_directory_mount_without_a_restart_checksum(chart: helm.Chart) -> None:
    """A rules change must not roll the pods (the watchdog reloads them); a token change must."""
    base: dict[str, Any] = {"mode": "gateway", "auth": {"token": "first-token-0123456789"}}

    def pod_annotations(values: dict[str, Any]) -> dict[str, str]:
        template = one(render(chart, values), "Deployment")["spec"]["template"]
        annotations: dict[str, str] = template["metadata"]["annotations"]
        return annotations

    before = pod_annotations(base)
    more_rules = {**base, "rules": {"packs": {"x": {"apiVersion": "agent-watchdog/v1",
                                                    "kind": "RulePack", "name": "x"}}}}
    assert pod_annotations(more_rules) == before
    assert pod_annotations({**base, "auth": {"token": "second-token-0123456789"}}) != before
    container = watchdog_containers(render(chart, base))[0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "watchdog-rules")
    assert "subPath" not in mount  # a subPath mount would never see the ConfigMap's updates
    assert env_of(container)["WATCHDOG_RULES"] == mount["mountPath"]


def test_rule_packs_become_files_of_the_configmap(chart: helm.Chart) -> None:
    text = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: as-text\n"
    manifests = render(chart, {"rules": {"packs": {
        "as-text": text, "as-map.yml": {"apiVersion": "agent-watchdog/v1", "kind": "RulePack",
                                        "name": "as-map", "disable": ["tool-cycle"]}}}})
    data = one(manifests, "ConfigMap", f"{FULLNAME}-rules")["data"]
    assert sorted(data) == ["as-map.yml", "as-text.yaml"]
    assert data["as-text.yaml"] == text
    assert yaml.safe_load(data["as-map.yml"])["disable"] == ["tool-cycle"]
    existing = render(chart, {"rules": {"existingConfigMap": "team-rules"}})
    assert not [m for m in existing if m["kind"] == "ConfigMap"]
    volumes = pod_spec(one(existing, "Pod"))["volumes"]
    assert {"name": "watchdog-rules", "configMap": {"name": "team-rules"}} in volumes


# -- the rendered env, as the watchdog sees it ----------------------------------------------

def rendered_env(container: dict[str, Any], secrets: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet resolves it, secretKeyRefs from ``secrets``."""
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            env[entry["name"]] = secrets[entry["valueFrom"]["secretKeyRef"]["key"]]
    return env


def test_the_watchdog_accepts_the_rendered_configuration(chart: helm.Chart) -> None:
    manifests = render(chart, MODES["sidecar-monitoring"])
    secret = one(manifests, "Secret")["stringData"]
    config = load(env=rendered_env(watchdog_containers(manifests)[0], secret))
    assert (config.api_address, config.metrics_address) == ("127.0.0.1:9477", "0.0.0.0:9464")
    assert config.max_request_bytes == 16777216  # not 1.6777216e+07
    assert (config.eval_interval, config.run_end_timeout, config.log_level) == (0.5, 600, "debug")
    assert config.api_token == "a-token-of-at-least-16-chars"
    assert config.webhooks[0]["actions"] == ["abort"]
    assert config.rules == ("/etc/watchdog/rules",) and config.default_rules is True

    gateway = watchdog_containers(render(chart, MODES["gateway"]))[0]
    env = rendered_env(gateway, {"api-token": "gateway-token-0123456789"})
    assert load(env=env).otlp_grpc_address == "0.0.0.0:4317"
    del env["WATCHDOG_API_TOKEN"]  # what the chart refuses to render: the watchdog refuses too
    with pytest.raises(ConfigError, match="non-loopback"):
        load(env=env)


# The configuration keys the chart sets from values of its own (ports, auth, rules, webhooks,
# forward, modelEndpoint), and `insecure`, which it does not offer: a gateway's listeners take a
# token, a sidecar's are on 127.0.0.1. Every other key goes under `config:`, as
# docs/kubernetes.md says, and reaches the watchdog: a value for each, none its default.
SET_BY_THE_CHART = {"otlp_grpc_address", "otlp_http_address", "api_address", "metrics_address",
                    "model_address", "state_dir", "rules", "default_rules",
                    "rules_watch_interval", "api_token", "webhooks", "forward_endpoint",
                    "forward_headers", "model_upstream", "model_upstream_anthropic",
                    "model_agent_name", "insecure", "state_max_ended_runs"}
CONFIG_VALUES: dict[str, tuple[Any, Any]] = {  # key: (the value under config:, as read)
    "run_end_timeout": ("30m", 1800.0), "loose_run_gap": ("3m", 180.0),
    "max_runs": (500, 500), "max_request_bytes": (1073741824, 1073741824),
    "max_pending_requests": (32, 32), "state_flush_interval": ("500ms", 0.5),
    "activity_log_size": (100, 100), "eval_interval": (0.5, 0.5), "fleet_window": ("10m", 600.0),
    "log_content_wait": ("5s", 5.0), "trace_url": ("https://g.example/t/{trace_id}",
                                                   "https://g.example/t/{trace_id}"),
    "log_level": ("debug", "debug"), "log_format": ("json", "json"), "native": (False, False),
    "forward_queue_size": (10, 10), "model_abort": ("error", "error"),
    "model_relay": ("python", "python"), "model_max_body_bytes": (1048576, 1048576),
    "model_max_concurrent": (16, 16), "model_max_inflight_bytes": (1 << 40, 1 << 40),
    "model_upstream_timeout": ("2m", 120.0), "model_body_timeout": (30, 30.0),
    "model_body_min_rate": (1024, 1024), "model_body_rate_window": ("10s", 10.0),
    "model_max_held_response_bytes": (1 << 30, 1 << 30),
    "model_shutdown_grace": ("15s", 15.0), "model_reply_window": ("10s", 10.0),
}


def test_the_gateway_waits_for_the_model_requests_in_flight_at_a_stop(
        chart: helm.Chart) -> None:
    """Kubernetes kills a pod `terminationGracePeriodSeconds` after its SIGTERM: at a stop the
    gRPC receiver gets up to SHUTDOWN_GRACE (5 s) first, then the model requests in flight their
    `model_shutdown_grace`, then the state's last flush. The chart asks what the docs do: the
    grace and 10 s more within the period."""
    assert SHUTDOWN_GRACE < 10
    deployment = one(render(chart, MODES["gateway"]), "Deployment")
    period = pod_spec(deployment)["terminationGracePeriodSeconds"]
    assert period >= Config().model_shutdown_grace + 10
    for grace in ("20s", 20, "19.5", "15s", 0, "-0", "+20"):  # (10 s under 30 s: it renders)
        render(chart, {**MODES["gateway"], "config": {"model_shutdown_grace": grace}})
    for grace in ("25s", 29, "20.5", "30s", "1m", "1m30s", "1h", "+25"):
        with pytest.raises(helm.HelmRenderError) as refused:
            render(chart, {**MODES["gateway"], "config": {"model_shutdown_grace": grace}})
        assert f"config.model_shutdown_grace={grace} leaves less than 10 s of " \
               "gateway.terminationGracePeriodSeconds=30" in str(refused.value)
    render(chart, {**MODES["gateway"], "config": {"model_shutdown_grace": "1m30s"},
                   "gateway": {"terminationGracePeriodSeconds": 100}})
    # unset, the grace is the watchdog's default (20 s), not none
    for period in (29, 0):
        with pytest.raises(helm.HelmRenderError) as refused:
            render(chart, {**MODES["gateway"],
                           "gateway": {"terminationGracePeriodSeconds": period}})
        assert f"config.model_shutdown_grace=20s (the default) leaves less than 10 s of " \
               f"gateway.terminationGracePeriodSeconds={period}" in str(refused.value)
    assert Config().model_shutdown_grace == 20
    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds=99"):
        render(chart, {**MODES["gateway"], "config": {"model_shutdown_grace": "1m30s"},
                       "gateway": {"terminationGracePeriodSeconds": 99}})


def test_every_whole_number_renders_as_its_digits(chart: helm.Chart) -> None:
    """Helm reads a values file's numbers as float64 and prints one of a million or more with an
    exponent (``replicas: 1e+06``), which Kubernetes does not take for an integer field: every
    number the chart writes itself is written as its digits, in the manifests and the notes."""
    big = 1_000_000
    probe = {"periodSeconds": big, "timeoutSeconds": big, "failureThreshold": big}
    values = {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET},
              "gateway": {"replicas": big, "terminationGracePeriodSeconds": big,
                          "podDisruptionBudget": {"enabled": True, "minAvailable": big},
                          "headlessService": True,
                          "collector": {"enabled": True, "queueSize": big}},
              "probes": {"startup": probe, "liveness": probe, "readiness": probe},
              "state": {"sizeLimit": big, "tmpSizeLimit": big}}
    files = render_files(chart, values)
    exponents = [f"{path.rsplit('/', 1)[-1]}: {line.strip()}" for path, text in files.items()
                 for line in text.splitlines()
                 if re.search(r"\b\d+(\.\d+)?e[+-]?\d+\b", line)]
    assert not exponents, exponents
    deployment = one(render(chart, values), "Deployment")
    assert (deployment["spec"]["replicas"], pod_spec(deployment)["terminationGracePeriodSeconds"]) \
        == (big, big)
    validate(render(chart, values))


@pytest.mark.parametrize(("size", "written"), [
    (1073741824, "1073741824"), (1 << 40, "1099511627776"), (1e20, "100000000000000000000"),
    (0.5, "0.5"), ("1Gi", "1Gi"), ("1e3", "1e3")])
def test_a_volume_size_is_written_as_a_kubernetes_quantity(chart: helm.Chart, size: Any,
                                                           written: str) -> None:
    """Helm reads a number as a float64 and printed 1073741824 as ``1.073741824e+09``: a size
    given as a number of bytes reaches the pod's volumes as its digits."""
    values = {**MODES["gateway"], "state": {"sizeLimit": size, "tmpSizeLimit": size}}
    text = render_files(chart, values)[f"{CHART.name}/templates/gateway-deployment.yaml"]
    assert text.count(f"sizeLimit: {written}\n") == 2, [
        line for line in text.splitlines() if "sizeLimit" in line]
    validate(render(chart, values))


@pytest.mark.parametrize("zero", [0, 0.0, "0", "0Mi", "0.0Gi"])
def test_a_zero_size_limit_is_no_limit_for_both_volumes(chart: helm.Chart, zero: Any) -> None:
    """``state.sizeLimit`` and ``state.tmpSizeLimit`` read a zero the same way: no limit, the
    field left out (as Kubernetes reads one that is not set). ``sizeLimit: 0`` wrote
    ``emptyDir: null`` (a volume with no source) while ``tmpSizeLimit: 0`` wrote ``0``."""
    for state in ({"sizeLimit": zero, "tmpSizeLimit": zero},
                  {"medium": "Memory", "sizeLimit": zero, "tmpSizeLimit": zero}):
        manifests = render(chart, {**MODES["gateway"], "state": state})
        volumes = {volume["name"]: volume for volume in
                   pod_spec(one(manifests, "Deployment"))["volumes"]}
        medium = {"medium": "Memory"} if "medium" in state else {}
        assert (volumes["watchdog-state"]["emptyDir"], volumes["watchdog-tmp"]["emptyDir"]) \
            == (medium, {}), volumes
        validate(manifests)
    volumes = pod_spec(one(render(chart, {**MODES["gateway"], "state": {
        "sizeLimit": "0.5Gi", "tmpSizeLimit": 1}}), "Deployment"))["volumes"]
    assert [volume.get("emptyDir") for volume in volumes[:2]] == [
        {"sizeLimit": "0.5Gi"}, {"sizeLimit": 1}]


# What one ended run of 100 calls takes in the store, its activity log full (docs/limits.md:
# Disk, measured), and a directive at most (its report prompt: up to 8 KiB of the log); the
# store's files grow to their high-water mark and never shrink.
STORED_LONG_RUN_BYTES = 36_000
STORED_DIRECTIVE_BYTES = 12_400
QUANTITY_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def test_the_state_volume_holds_the_ended_runs_the_chart_keeps(chart: helm.Chart) -> None:
    """The watchdog keeps its newest ``state.maxEndedRuns`` ended runs, and as many
    directives of ended runs: the chart's default volume (``state.sizeLimit``) holds that many
    long runs and directives with a quarter of it to spare (for sessions and SQLite's journal).
    The watchdog's own default, 100,000, some 3.6 GB of such runs, outgrew the 1Gi and the
    kubelet evicted the pod. ``0`` leaves the watchdog's default; ``config:`` does not take
    the key (one place to set it)."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["state"]
    size = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)", defaults["sizeLimit"])
    assert size, defaults["sizeLimit"]
    volume = int(size.group(1)) * QUANTITY_UNITS[size.group(2)]
    secrets = {"api-token": "gateway-token-0123456789"}

    def kept(values: dict[str, Any]) -> int:
        container = watchdog_containers(render(chart, {**MODES["gateway"], **values}))[0]
        return load(env=rendered_env(container, secrets)).state_max_ended_runs

    assert kept({}) == defaults["maxEndedRuns"] == 15_000
    assert kept({}) * (STORED_LONG_RUN_BYTES + STORED_DIRECTIVE_BYTES) <= 0.75 * volume
    assert Config().state_max_ended_runs * STORED_LONG_RUN_BYTES > volume  # (why it is set)
    assert kept({"state": {"maxEndedRuns": 0}}) == Config().state_max_ended_runs
    assert kept({"state": {"maxEndedRuns": 1_000_000}}) == 1_000_000  # (not 1e+06)
    for refused in ({"state": {"maxEndedRuns": -1}}, {"state": {"maxEndedRuns": 10**8}},
                    {"config": {"state_max_ended_runs": 5}}):
        with pytest.raises(helm.HelmValuesError):  # (the schema's)
            render(chart, {**MODES["gateway"], **refused})


def test_every_configuration_key_the_chart_does_not_set_goes_under_config(
        chart: helm.Chart) -> None:
    """`config:` takes every key of the configuration reference the chart does not set itself
    (the schema refused log_content_wait, which values.yaml offers, loose_run_gap, native and
    model_relay), and each reaches the watchdog as written."""
    keys = {f.name for f in fields(Config)}
    assert set(CONFIG_VALUES) == keys - SET_BY_THE_CHART
    for key, (_, read) in CONFIG_VALUES.items():
        assert read != getattr(Config(), key), key
    values = {**MODES["gateway"], "config": {key: value for key, (value, _)
                                             in CONFIG_VALUES.items()}}
    container = watchdog_containers(render(chart, values))[0]
    config = load(env=rendered_env(container, {"api-token": "gateway-token-0123456789"}))
    assert {key: getattr(config, key) for key in CONFIG_VALUES} == {
        key: read for key, (_, read) in CONFIG_VALUES.items()}


# Every key the chart takes as a number of seconds with a fraction (values.schema.json: the
# time keys under config:, and rules.watchInterval), as it renders it into the environment.
SECONDS_KEYS = {"run_end_timeout", "loose_run_gap", "state_flush_interval", "eval_interval",
                "fleet_window", "log_content_wait", "model_upstream_timeout",
                "model_body_timeout", "model_body_rate_window", "model_shutdown_grace",
                "model_reply_window"}


@pytest.mark.parametrize("seconds", [1e-07, 1.25e-05, 2.5e-10, 0.1, 0.3, 123.456, 0.5])
def test_a_number_of_seconds_reaches_the_watchdog_as_written(chart: helm.Chart,
                                                             seconds: float) -> None:
    """Helm reads a number as a float64 and printed ``eval_interval: 0.0000001`` as ``1e-07``,
    a form the watchdog refuses (one line at start: a crash loop): every number the chart puts
    in the environment is written without an exponent, as few decimals as read back the same."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    numbers = {key for key, spec in schema["properties"]["config"]["properties"].items()
               if any(choice.get("type") == "number" for choice in spec.get("anyOf", [spec]))}
    assert numbers == SECONDS_KEYS
    written = dict.fromkeys(SECONDS_KEYS, seconds)
    # (the shutdown grace leaves 10 s of the gateway's terminationGracePeriodSeconds of 30)
    written["model_shutdown_grace"] = seconds if seconds <= 20 else seconds / 10
    values = {**MODES["gateway"], "config": written, "rules": {"watchInterval": seconds}}
    container = watchdog_containers(render(chart, values))[0]
    env = rendered_env(container, {"api-token": "gateway-token-0123456789"})
    for key in (*SECONDS_KEYS, "rules_watch_interval"):
        assert "e" not in env[f"WATCHDOG_{key.upper()}"], (key, env[f"WATCHDOG_{key.upper()}"])
    config = load(env=env)
    assert {key: getattr(config, key) for key in (*SECONDS_KEYS, "rules_watch_interval")} == \
        {**written, "rules_watch_interval": seconds}


def test_the_gateway_starts_among_its_own_services_links(chart: helm.Chart) -> None:
    """Installed as the README does (`helm install watchdog`), the gateway's Services are
    watchdog-agent-watchdog(-headless): the kubelet gives every pod of the namespace, the
    gateway's own, WATCHDOG_AGENT_WATCHDOG_* service links (a headless Service none), which
    the watchdog refused as unknown variables (a crash loop)."""
    manifests = chart.render(copy.deepcopy(MODES["gateway"]), name="watchdog",
                             namespace=NAMESPACE)
    services = [doc for path, text in sorted(manifests.items()) if not path.endswith("NOTES.txt")
                for doc in yaml.safe_load_all(text) if doc and doc["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} >= {"watchdog-agent-watchdog"}
    links: dict[str, str] = {}
    for service in services:
        if service["spec"].get("clusterIP") != "None":
            links.update(service_links(service["metadata"]["name"], "10.0.0.9", {
                port["name"]: port["port"] for port in service["spec"]["ports"]}))
    assert "WATCHDOG_AGENT_WATCHDOG_SERVICE_HOST" in links
    gateway = watchdog_containers(render(chart, MODES["gateway"]))[0]
    env = rendered_env(gateway, {"api-token": "gateway-token-0123456789"})
    assert load(env={**links, **env}).otlp_grpc_address == "0.0.0.0:4317"


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


class ConfigMapVolume:
    """A ConfigMap volume laid out as the kubelet does it: the files live in a timestamped
    directory, ``..data`` links to it and each key links through ``..data``; an update writes a
    new directory and renames a new ``..data`` link over the old one (atomic)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = 0
        path.mkdir()

    def write(self, data: dict[str, str]) -> None:
        self.version += 1
        target = self.path / f"..2026_11_22_00_00_0{self.version}.000000001"
        target.mkdir()
        for key, text in data.items():
            (target / key).write_text(text)
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        (self.path / "..data_tmp").symlink_to(target.name)
        os.replace(self.path / "..data_tmp", self.path / "..data")
        for key in data:
            if not (self.path / key).is_symlink():
                (self.path / key).symlink_to(f"..data/{key}")
        if old:
            shutil.rmtree(self.path / old)


def pack(max_tool_calls: int) -> str:
    return yaml.safe_dump({"apiVersion": "agent-watchdog/v1", "kind": "RulePack",
                           "name": "my-team", "budgets": [{"agents": ["explorer*"],
                                                           "max_tool_calls": max_tool_calls}]})


def wait_for(probe: Callable[[], Any], timeout: float, what: str,
             process: subprocess.Popen[bytes]) -> Any:
    """Poll ``probe`` (an error counts as not yet) until it holds; fail at once if the watchdog
    exits first."""

    def held() -> Any:
        with suppress(OSError, ValueError):  # urllib's URLError is an OSError
            return probe()
        return None

    result = wait_until(lambda: process.poll() is not None or held(), what, timeout, every=0.05)
    if process.poll() is not None:
        pytest.fail(f"the watchdog exited ({process.returncode}) before {what}: "
                    + (process.stderr.read().decode() if process.stderr else ""))
    return result


def test_sidecar_reloads_rules_when_the_configmap_is_swapped(chart: helm.Chart,
                                                             tmp_path: Path) -> None:
    """The real `watchdog serve` with the sidecar's rendered env (paths moved to tmp_path):
    a kubelet-style ConfigMap update changes the rules in force, without a restart."""
    ports = {"otlpGrpc": free_port(), "otlpHttp": free_port(), "api": free_port(),
             "metrics": free_port()}
    values = {"ports": ports, "rules": {"watchInterval": "100ms", "packs": {"my-team": pack(20)}}}
    manifests = render(chart, values)
    volume = ConfigMapVolume(tmp_path / "rules")
    volume.write(one(manifests, "ConfigMap")["data"])
    env = rendered_env(watchdog_containers(manifests)[0], {})
    env.update(WATCHDOG_STATE_DIR=str(tmp_path / "state"), WATCHDOG_RULES=str(volume.path),
               # the metrics port binds 0.0.0.0 in a pod; loopback is enough here
               WATCHDOG_METRICS_ADDRESS=f"127.0.0.1:{ports['metrics']}")
    process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"],
                               env={**{k: v for k, v in os.environ.items()
                                       if not k.startswith("WATCHDOG_")}, **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    api = f"http://127.0.0.1:{ports['api']}/v1/rules"
    try:
        wait_for(lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{ports['metrics']}/readyz", timeout=2).status == 200,
            30, "/readyz", process)
        assert get_json(api)["budgets"] == [{"agents": ["explorer*"], "max_tool_calls": 20}]
        volume.write({"my-team.yaml": pack(7)})
        wait_for(lambda: get_json(api)["budgets"][0]["max_tool_calls"] == 7, 15,
                 "the rules reload", process)
        assert process.poll() is None  # reloaded in place
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


# -- dashboards and alert rules: files that drop in ------------------------------------------

def chart_copy_with(source: ChartSource, tmp_path: Path, alerts: dict[str, str],
                    dashboards: dict[str, str]) -> Path:
    work = tmp_path / "agent-watchdog"
    shutil.copytree(source.directory, work, ignore=shutil.ignore_patterns("alerts", "dashboards"))
    for folder, files in (("alerts", alerts), ("dashboards", dashboards)):
        (work / folder).mkdir()
        for name, text in files.items():
            (work / folder / name).write_text(text)
    return work


MONITORING = {"prometheusRule": {"enabled": True, "runbookUrl": RUNBOOK_URL},
              "dashboards": {"enabled": True}}


def with_runbook(rule: dict[str, Any]) -> dict[str, Any]:
    """An alert as the chart renders it: with its absolute runbook URL."""
    if "alert" not in rule:
        return rule
    url = f"{RUNBOOK_URL}#{rule['alert'].lower()}"
    return {**rule, "annotations": {**rule.get("annotations", {}), "runbook_url": url}}


def test_no_alert_or_dashboard_files_render_nothing(source: ChartSource, tmp_path: Path) -> None:
    with helm.Chart.load(chart_copy_with(source, tmp_path, {}, {})) as empty:
        assert kinds(render(empty, MONITORING)) == [f"ConfigMap/{FULLNAME}-rules",
                                                    f"Pod/{FULLNAME}-test"]


def test_alert_files_and_dashboards_drop_in(source: ChartSource, tmp_path: Path) -> None:
    rule = {"alert": "A", "expr": "up == 0", "for": "5m", "labels": {"severity": "warning"},
            "annotations": {"summary": "{{ $labels.instance }} is down"}}
    alerts = {"a.yaml": yaml.safe_dump({"groups": [{"name": "one", "rules": [rule]}]}),
              "b.yaml": yaml.safe_dump({"groups": [{"name": "two", "rules": [
                  {"record": "job:up:sum", "expr": "sum by (job) (up)"}]}]})}
    dashboards = {"Agents_Overview.json": json.dumps({"title": "Agents", "panels": [
        {"targets": [{"expr": "sum(agent_watchdog_runs_active)",
                      "legendFormat": "{{agent}}"}]}]}),
                  "ingest.json": json.dumps({"title": "Ingest"})}
    with helm.Chart.load(chart_copy_with(source, tmp_path, alerts, dashboards)) as loaded:
        manifests = render(loaded, {**MONITORING, "dashboards": {
            "enabled": True, "labels": {"team": "ml"}, "namespace": "grafana"}})
    validate(manifests)
    groups = one(manifests, "PrometheusRule")["spec"]["groups"]
    assert [g["name"] for g in groups] == ["one", "two"]
    # Prometheus' {{ $labels }} left alone by Helm; the record rule as it is.
    assert groups[0]["rules"][0] == with_runbook(rule)
    assert groups[1]["rules"] == yaml.safe_load(alerts["b.yaml"])["groups"][0]["rules"]
    maps = {m["metadata"]["name"]: m for m in manifests
            if m["metadata"]["labels"].get("grafana_dashboard") == "1"}
    assert sorted(maps) == [f"{FULLNAME}-dashboard-agents-overview",
                            f"{FULLNAME}-dashboard-ingest"]
    overview = maps[f"{FULLNAME}-dashboard-agents-overview"]
    assert overview["metadata"]["namespace"] == "grafana"
    assert overview["metadata"]["labels"]["team"] == "ml"
    assert overview["data"] == {"Agents_Overview.json": dashboards["Agents_Overview.json"]}


def test_the_shipped_alerts_and_dashboards_render(source: ChartSource, chart: helm.Chart) -> None:
    """Whatever alerts/*.yaml and dashboards/*.json the chart ships end up in the manifests."""
    manifests = render(chart, MONITORING)
    shipped_groups = [{**group, "rules": [with_runbook(rule) for rule in group["rules"]]}
                      for path in sorted((source.directory / "alerts").glob("*.yaml"))
                      for group in yaml.safe_load(path.read_text())["groups"]]
    rules = [m for m in manifests if m["kind"] == "PrometheusRule"]
    assert [r["spec"]["groups"] for r in rules] == ([shipped_groups] if shipped_groups else [])
    shipped_dashboards = {p.name: p.read_text()
                          for p in (source.directory / "dashboards").glob("*.json")}
    rendered = {key: text for m in manifests if m["kind"] == "ConfigMap"
                and m["metadata"]["labels"].get("grafana_dashboard") == "1"
                for key, text in m["data"].items()}
    assert {k: json.loads(v) for k, v in rendered.items()} == {
        k: json.loads(v) for k, v in shipped_dashboards.items()}


def test_the_dashboard_links_to_the_selected_agents_traces(source: ChartSource,
                                                          chart: helm.Chart) -> None:
    """prometheusRule.traceSearchUrl (or dashboards.traceSearchUrl) gives the shipped dashboard,
    which has an $agent variable, a link to that agent's traces, Grafana's variables in place
    of {agent} and {namespace}; nothing else of the dashboard changes."""
    def dashboard(values: dict[str, Any]) -> dict[str, Any]:
        [text] = [text for m in render(chart, values) if m["kind"] == "ConfigMap"
                  and m["metadata"]["labels"].get("grafana_dashboard") == "1"
                  for text in m["data"].values()]
        loaded: dict[str, Any] = json.loads(text)
        return loaded

    shipped = json.loads((source.directory / "dashboards/agent-watchdog.json").read_text())
    search = "https://jaeger.example.com/search?service={agent}&tags=ns:{namespace}"
    linked = dashboard({**MONITORING, "prometheusRule": {
        **MONITORING["prometheusRule"], "traceSearchUrl": search}})
    [link] = linked.pop("links")
    assert link["url"] == ("https://jaeger.example.com/search?service=${agent:percentencode}"
                           "&tags=ns:${namespace:percentencode}")
    assert (link["type"], link["title"], link["targetBlank"]) == (
        "link", "Traces of ${agent}", True)
    assert linked == {key: value for key, value in shipped.items() if key != "links"}
    own = dashboard({**MONITORING, "dashboards": {
        "enabled": True, "traceSearchUrl": "https://tempo.example.com/{agent}"}})
    assert [link["url"] for link in own["links"]] == [
        "https://tempo.example.com/${agent:percentencode}"]
    assert "links" not in dashboard(MONITORING)


# -- chart metadata --------------------------------------------------------------------------

def test_chart_metadata_and_lint(source: ChartSource, chart: helm.Chart) -> None:
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["kubeVersion"] == ">=1.25.0-0"
    # The sidecar templates take their default image tag from a helper (an including chart's
    # .Chart is its own): it must follow appVersion.
    [container] = watchdog_containers(render(chart, MODES["gateway"]))
    assert container["image"] == f"agent-watchdog-sidecar:{metadata['appVersion']}"
    report = helm.lint(source.loadable, strict=True, kube_version="v1.29.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == []


def test_notes_tell_each_mode_what_to_do(chart: helm.Chart) -> None:
    sidecar = render_files(chart)["agent-watchdog/templates/NOTES.txt"]
    assert 'include "agent-watchdog.inject" (list $ "my-agent.deployment")' in sidecar
    assert "native sidecar (initContainers)" in sidecar
    gateway = render_files(chart, MODES["gateway"])["agent-watchdog/templates/NOTES.txt"]
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT=http://{FULLNAME}.{NAMESPACE}.svc:4318" in gateway


# -- pass-through: forward.endpoint --------------------------------------------------------

FORWARD = {"endpoint": "http://otel-collector.observability:4318",
           "headersSecret": {"name": "collector-headers"}}


@pytest.mark.parametrize("mode", ["sidecar", "gateway"])
def test_forward_values_reach_the_watchdog(chart: helm.Chart, mode: str) -> None:
    values: dict[str, Any] = {"forward": FORWARD, "config": {"forward_queue_size": 500}}
    if mode == "gateway":
        values |= {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET}}
    manifests = render(chart, values)
    validate(manifests)
    [container] = watchdog_containers(manifests)
    env = env_of(container)
    assert env["WATCHDOG_FORWARD_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["WATCHDOG_FORWARD_HEADERS"] == {
        "secretKeyRef": {"name": "collector-headers", "key": "headers"}}
    secrets = {"headers": "Authorization=Bearer%20up-token,X-Scope-OrgID=team-a",
               "api-token": "gateway-token-0123456789"}
    config = load(env=rendered_env(container, secrets))
    assert config.forward_endpoint == "http://otel-collector.observability:4318"
    assert config.forward_headers == {"Authorization": "Bearer up-token",
                                      "X-Scope-OrgID": "team-a"}
    assert config.forward_queue_size == 500


def test_the_agents_sidecar_forwards_and_without_an_endpoint_nothing_is_set(
        chart: helm.Chart, example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"forward": {"endpoint": FORWARD["endpoint"]}})
    validate(manifests)
    [sidecar] = pod_spec(one(manifests, "Deployment", "my-agent"))["initContainers"]
    assert env_of(sidecar)["WATCHDOG_FORWARD_ENDPOINT"] == FORWARD["endpoint"]
    assert "WATCHDOG_FORWARD_HEADERS" not in env_of(sidecar)
    forward_env = {"WATCHDOG_FORWARD_ENDPOINT", "WATCHDOG_FORWARD_HEADERS"}
    for container in watchdog_containers(render(chart)):
        assert not forward_env & env_of(container).keys()


@pytest.mark.parametrize(("values", "refusal"), [
    ({"forward": {"endpoint": "otel-collector:4318"}}, "/forward/endpoint"),
    ({"forward": {"endpoint": "http://collector:4318?x"}}, "/forward/endpoint"),
    ({"forward": {"endpont": "http://collector:4318"}}, "'endpont' not allowed"),
    ({"forward": {"headersSecret": {"name": "h", "key": ""}}}, "/forward/headersSecret/key"),
    ({"config": {"forward_queue_size": 0}}, "/config/forward_queue_size"),
])
def test_bad_forward_values_are_refused_by_the_schema(chart: helm.Chart, values: dict[str, Any],
                                                      refusal: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, values)
    assert refusal in str(refused.value)


def test_forward_headers_without_an_endpoint_fail_to_render(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(chart, {"forward": {"headersSecret": {"name": "collector-headers"}}})
    assert "forward.headersSecret is set but forward.endpoint is not" in str(refused.value)
