"""The Helm chart's model endpoint (DESIGN §12): rendered offline by helm-python-sdk's Helm
library, as in tests/test_helm_chart.py.

A sidecar serves it on 127.0.0.1 with ``model_agent_name`` from its pod's app name (the
downward API, resolved here as the kubelet does); a gateway
on 0.0.0.0 behind a Service port ``model``; ``modelEndpoint.agentEnv`` points the agent
containers' OpenAI and Anthropic SDKs at it. The rendered env is fed to the real watchdog's
configuration loader, which must accept it and read the values the chart meant, and to a real
``watchdog serve``, through which the real ``openai`` SDK gets its answer from a scripted
upstream, the call booked as a run of the pod's app.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import openai
import pytest
import yaml

from tests.frameworks.fakellm import FakeLLM, answer, steps
from tests.harness import wait_until
from tests.ports import free_port
from tests.processes import running_sidecar
from watchdog.shell.config import load

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "agent-watchdog"
NAMESPACE = "agents"
TOKEN = "a-token-of-at-least-16-chars"
GATEWAY = {"mode": "gateway", "auth": {"token": TOKEN}}

Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def example_chart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[helm.Chart]:
    """examples/my-agent with its dependency built, as `helm dependency update` would."""
    work = tmp_path_factory.mktemp("example") / "agent-watchdog"
    shutil.copytree(CHART, work)
    example = work / "examples" / "my-agent"
    helm.dependency_update(example, skip_refresh=True)
    with helm.Chart.load(example) as loaded:
        yield loaded


def manifests_of(files: dict[str, str]) -> list[Manifest]:
    return [doc for path, text in sorted(files.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[Manifest]:
    return manifests_of(chart.render(copy.deepcopy(values), name="rel", namespace=NAMESPACE))


def render_example(example_chart: helm.Chart,
                   watchdog: dict[str, Any] | None = None) -> list[Manifest]:
    values = {"watchdog": watchdog} if watchdog else None
    return manifests_of(example_chart.render(values, name="my-agent", namespace=NAMESPACE))


def one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    [found] = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def pod_spec(manifest: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]
    return spec if manifest["kind"] == "Pod" else spec["template"]["spec"]


def containers(manifest: Manifest) -> dict[str, dict[str, Any]]:
    spec = pod_spec(manifest)
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def kubelet_env(container: dict[str, Any], pod_labels: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet gives it: plain values, and the downward API's
    ``metadata.labels['NAME']`` (empty when the pod lacks the label)."""
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "fieldRef" in entry["valueFrom"]:
            path = entry["valueFrom"]["fieldRef"]["fieldPath"]
            assert path.startswith("metadata.labels['") and path.endswith("']"), path
            env[entry["name"]] = pod_labels.get(path[len("metadata.labels['"):-2], "")
    return env


def model_port(container: dict[str, Any]) -> int | None:
    ports = [p["containerPort"] for p in container["ports"] if p["name"] == "wd-model"]
    return ports[0] if ports else None


def validate(manifests: list[Manifest]) -> None:
    for manifest in manifests:
        if manifest["kind"] in ("Deployment", "Service", "Pod"):
            kubernetes_validate.validate(manifest, "1.29.0", strict=True)


def test_the_sidecar_serves_it_on_loopback_named_after_its_pod(example_chart: helm.Chart
                                                                ) -> None:
    manifests = render_example(example_chart)
    validate(manifests)
    deployment = one(manifests, "Deployment", "my-agent")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    sidecar, agent = containers(deployment)["watchdog"], containers(deployment)["agent"]
    env = env_of(sidecar)
    assert env["WATCHDOG_MODEL_ADDRESS"] == "127.0.0.1:9478" and model_port(sidecar) == 9478
    # the agent name of calls nothing else names: the pod's app name, read by the downward API
    assert env["WATCHDOG_MODEL_AGENT_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['app.kubernetes.io/name']"}}
    # the upstreams are the watchdog's defaults unless set
    assert "WATCHDOG_MODEL_UPSTREAM" not in env and "WATCHDOG_MODEL_UPSTREAM_ANTHROPIC" not in env
    # the agent opts in itself unless modelEndpoint.agentEnv is set
    assert "OPENAI_BASE_URL" not in env_of(agent) and "ANTHROPIC_BASE_URL" not in env_of(agent)
    config = load(env=kubelet_env(sidecar, pod_labels))
    assert (config.model_address, config.model_agent_name) == ("127.0.0.1:9478", "my-agent")
    # a pod without the label: nothing names the agent, and the watchdog starts all the same
    assert load(env=kubelet_env(sidecar, {"app": "agent"})).model_agent_name is None


def test_the_label_is_a_value(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"modelEndpoint": {"agentNameLabel": "app"}})
    deployment = one(manifests, "Deployment", "my-agent")
    sidecar = containers(deployment)["watchdog"]
    assert env_of(sidecar)["WATCHDOG_MODEL_AGENT_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['app']"}}
    assert load(env=kubelet_env(sidecar, {"app": "triage"})).model_agent_name == "triage"
    none = render_example(example_chart, {"modelEndpoint": {"agentNameLabel": ""}})
    sidecar = containers(one(none, "Deployment", "my-agent"))["watchdog"]
    assert "WATCHDOG_MODEL_AGENT_NAME" not in env_of(sidecar)


def test_agent_env_points_the_agents_sdks_at_the_sidecar(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"modelEndpoint": {"agentEnv": True},
                                               "ports": {"model": 9555}})
    validate(manifests)
    deployment = one(manifests, "Deployment", "my-agent")
    agent_env = env_of(containers(deployment)["agent"])
    assert agent_env["OPENAI_BASE_URL"] == "http://127.0.0.1:9555/v1"
    assert agent_env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9555"
    sidecar = containers(deployment)["watchdog"]
    assert env_of(sidecar)["WATCHDOG_MODEL_ADDRESS"] == "127.0.0.1:9555"
    assert model_port(sidecar) == 9555


def test_values_set_the_upstreams_and_the_agent_name(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"modelEndpoint": {
        "upstream": "http://vllm.models.svc:8000/v1",
        "upstreamAnthropic": "https://anthropic.internal.example.com",
        "agentName": "billing-bot"}})
    sidecar = containers(one(manifests, "Deployment", "my-agent"))["watchdog"]
    config = load(env=kubelet_env(sidecar, {"app.kubernetes.io/name": "my-agent"}))
    assert config.model_upstream == "http://vllm.models.svc:8000/v1"
    assert config.model_upstream_anthropic == "https://anthropic.internal.example.com"
    assert config.model_agent_name == "billing-bot"


def test_off_renders_no_endpoint(example_chart: helm.Chart, chart: helm.Chart) -> None:
    off = {"modelEndpoint": {"enabled": False, "agentEnv": True}}
    deployment = one(render_example(example_chart, off), "Deployment", "my-agent")
    sidecar, agent = containers(deployment)["watchdog"], containers(deployment)["agent"]
    assert not [name for name in env_of(sidecar) if name.startswith("WATCHDOG_MODEL_")]
    assert model_port(sidecar) is None and "OPENAI_BASE_URL" not in env_of(agent)
    service = one(render(chart, {**GATEWAY, **off}), "Service", "rel-agent-watchdog")
    assert "model" not in [port["name"] for port in service["spec"]["ports"]]


def test_the_gateway_serves_it_behind_a_service_port(chart: helm.Chart) -> None:
    manifests = render(chart, GATEWAY)
    validate(manifests)
    gateway = containers(one(manifests, "Deployment", "rel-agent-watchdog"))["watchdog"]
    env = env_of(gateway)
    assert env["WATCHDOG_MODEL_ADDRESS"] == "0.0.0.0:9478"
    assert "WATCHDOG_MODEL_AGENT_NAME" not in env  # many agents: each names itself
    service = one(manifests, "Service", "rel-agent-watchdog")
    [port] = [p for p in service["spec"]["ports"] if p["name"] == "model"]
    assert (port["port"], port["targetPort"]) == (9478, "wd-model") and model_port(gateway)
    headless = one(manifests, "Service", "rel-agent-watchdog-headless")  # for the Collector
    assert "model" not in [p["name"] for p in headless["spec"]["ports"]]
    config = load(env={**{k: v for k, v in env.items() if isinstance(v, str)},
                       "WATCHDOG_API_TOKEN": TOKEN})  # the one secretKeyRef
    assert config.model_address == "0.0.0.0:9478"


def test_agents_of_a_gateway_get_the_service(example_chart: helm.Chart) -> None:
    manifests = render_example(example_chart, {"mode": "gateway", "auth": {"token": TOKEN},
                                               "modelEndpoint": {"agentEnv": True}})
    deployment = one(manifests, "Deployment", "my-agent")
    assert list(containers(deployment)) == ["agent"]  # no sidecar in gateway mode
    agent_env = env_of(containers(deployment)["agent"])
    service = "my-agent-agent-watchdog.agents.svc"  # its token and name in the path
    base = f"http://{service}:9478/token/$(WATCHDOG_API_TOKEN)/agent/$(AGENT_WATCHDOG_AGENT_NAME)"
    assert agent_env["OPENAI_BASE_URL"] == base + "/v1"
    assert agent_env["ANTHROPIC_BASE_URL"] == base
    assert agent_env["AGENT_WATCHDOG_AGENT_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['app.kubernetes.io/name']"}}
    names = list(agent_env)  # the kubelet expands $(NAME) of an entry that comes before
    assert names.index("WATCHDOG_API_TOKEN") < names.index("OPENAI_BASE_URL")
    assert names.index("AGENT_WATCHDOG_AGENT_NAME") < names.index("OPENAI_BASE_URL")
    # a name given (percent-encoded), or none to give
    for endpoint, path in (({"agentName": "billing bot+1"}, "/agent/billing%20bot%2B1"),
                           ({"agentNameLabel": ""}, "")):
        manifests = render_example(example_chart, {
            "mode": "gateway", "auth": {"token": TOKEN},
            "modelEndpoint": {"agentEnv": True, **endpoint}})
        agent_env = env_of(containers(one(manifests, "Deployment", "my-agent"))["agent"])
        assert agent_env["OPENAI_BASE_URL"] == (
            f"http://{service}:9478/token/$(WATCHDOG_API_TOKEN){path}/v1")
        assert "AGENT_WATCHDOG_AGENT_NAME" not in agent_env


@pytest.mark.parametrize(("values", "named"), [
    ({"modelEndpoint": {"upstream": "ftp://files.example.com"}}, "/modelEndpoint/upstream"),
    ({"modelEndpoint": {"upstreamAnthropic": "api.anthropic.com"}},
     "/modelEndpoint/upstreamAnthropic"),
    ({"modelEndpoint": {"enable": True}}, "'enable' not allowed"),
    ({"modelEndpoint": {"agentName": "a\nb"}}, "/modelEndpoint/agentName"),
    ({"modelEndpoint": {"agentNameLabel": "a label"}}, "/modelEndpoint/agentNameLabel"),
    ({"ports": {"model": 0}}, "/ports/model"),
    ({"config": {"model_abort": "crash"}}, "/config/model_abort"),
])
def test_bad_values_are_refused_by_name(chart: helm.Chart, values: dict[str, Any],
                                        named: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, values)
    assert named in str(refused.value)


def test_notes_give_the_env_line(chart: helm.Chart) -> None:
    sidecar = chart.render(None, name="rel", namespace=NAMESPACE)
    notes = next(text for path, text in sidecar.items() if path.endswith("NOTES.txt"))
    assert "OPENAI_BASE_URL=http://127.0.0.1:9478/v1" in notes
    gateway = chart.render(copy.deepcopy(GATEWAY), name="rel", namespace=NAMESPACE)
    notes = next(text for path, text in gateway.items() if path.endswith("NOTES.txt"))
    assert "OPENAI_BASE_URL=http://rel-agent-watchdog.agents.svc:9478/token/<token>/v1" in notes
    assert ".../token/<token>/agent/<name>/v1" in notes


@pytest.mark.parametrize("mode", ["sidecar", "gateway"])
def test_a_real_watchdog_with_the_rendered_env_answers_through_its_upstream(
        example_chart: helm.Chart, tmp_path: Path, mode: str) -> None:
    """``watchdog serve`` with the env the chart renders (the example agent's sidecar, or the
    gateway beyond loopback with its token; ports and paths moved to tmp_path, the upstream a
    scripted one): the agent's ``openai`` SDK, pointed only by the base URL
    ``modelEndpoint.agentEnv`` gives it (the gateway's token in its path, as the kubelet expands
    it), gets the upstream's answer, and the call is a run (of agent "my-agent", the pod's app
    name: the sidecar's own, or the gateway's from the base URL's path)."""
    ports = {"otlpGrpc": free_port(), "otlpHttp": free_port(), "api": free_port(),
             "metrics": free_port(), "model": free_port()}
    with FakeLLM() as llm:
        llm.script("gpt-test", steps(answer("Hello from upstream.")))
        values = {"ports": ports, "modelEndpoint": {"upstream": llm.base_url, "agentEnv": True}}
        if mode == "gateway":
            values |= copy.deepcopy(GATEWAY)
        manifests = render_example(example_chart, values)
        deployment = one(manifests, "Deployment", "my-agent")
        watchdog = deployment if mode == "sidecar" else one(
            manifests, "Deployment", "my-agent-agent-watchdog")
        pod_labels = watchdog["spec"]["template"]["metadata"]["labels"]
        env = kubelet_env(containers(watchdog)["watchdog"], pod_labels)
        (tmp_path / "rules").mkdir()
        env.update(WATCHDOG_STATE_DIR=str(tmp_path / "state"),
                   WATCHDOG_RULES=str(tmp_path / "rules"),
                   WATCHDOG_METRICS_ADDRESS=f"127.0.0.1:{ports['metrics']}")
        if mode == "gateway":
            env["WATCHDOG_API_TOKEN"] = TOKEN  # (its secretKeyRef)
        agent = containers(deployment)["agent"]
        agent_env = {**kubelet_env({"env": [e for e in agent["env"] if "secretKeyRef" not in
                                            e.get("valueFrom", {})]},
                                   deployment["spec"]["template"]["metadata"]["labels"]),
                     "WATCHDOG_API_TOKEN": TOKEN}  # (its secretKeyRef)
        base_url = re.sub(r"\$\((\w+)\)", lambda m: agent_env[m.group(1)],
                          agent_env["OPENAI_BASE_URL"]).replace(
            "my-agent-agent-watchdog.agents.svc", "127.0.0.1")
        assert (TOKEN in base_url) is (mode == "gateway"), base_url
        runs = served_call(env, ports, base_url, TOKEN if mode == "gateway" else None)
        assert llm.request_headers("gpt-test")[0]["authorization"] == "Bearer sk-chart-test"
        assert [run["agent"] for run in runs] == ["my-agent"]  # the pod's app name, both ways


def served_call(env: dict[str, str], ports: dict[str, int], base_url: str,
                token: str | None) -> list[dict[str, Any]]:
    """A ``watchdog serve`` with ``env``; one chat completion through ``base_url`` by the
    ``openai`` SDK, answered by the upstream; the runs its control API then lists."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    with running_sidecar({**environment, **env}, ports["metrics"]):
        client = openai.OpenAI(base_url=base_url, api_key="sk-chart-test", max_retries=0)
        reply = client.chat.completions.create(model="gpt-test", messages=[
            {"role": "user", "content": "Say hello."}])
        assert reply.choices[0].message.content == "Hello from upstream."
        request = urllib.request.Request(
            f"http://127.0.0.1:{ports['api']}/v1/runs",
            headers={"Authorization": f"Bearer {token}"} if token else {})

        def listed() -> list[dict[str, Any]]:
            with urllib.request.urlopen(request, timeout=2) as response:
                return json.loads(response.read())["runs"]  # type: ignore[no-any-return]

        return wait_until(listed, what="the agent's run", timeout=20, every=0.05)
