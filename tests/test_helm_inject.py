"""``agent-watchdog.inject``: the one line an agent's chart adds to run the watchdog next to its
agent. An agent chart (built here, with this chart as its dependency, as examples/my-agent is)
wraps each workload in a named template and includes it through ``agent-watchdog.inject``; the
rendered manifests pass kubernetes-validate --strict and carry exactly what the named templates
of the long way add, for every workload kind it takes.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.test_helm_chart import CHART, EXAMPLE, NAMESPACE, env_of, one, pod_spec, validate

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TOKEN_SECRET = "agents-watchdog-token"

CHART_YAML = """\
apiVersion: v2
name: agents
version: 0.1.0
dependencies:
  - name: agent-watchdog
    version: 0.1.0
    repository: file://../..
    alias: watchdog
"""

# The long way: the named templates of templates/_sidecar.tpl, placed by hand.
LONG = """\
{{- $wd := dict "root" $ "values" .Values.watchdog }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: long
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels:
        app: agent
        {{- include "agent-watchdog.sidecarPodLabels" $wd | nindent 8 }}
      annotations:
        {{- include "agent-watchdog.sidecarPodAnnotations" $wd | nindent 8 }}
    spec:
      initContainers:
        {{- include "agent-watchdog.sidecar" $wd | nindent 8 }}
      containers:
        - name: agent
          image: registry.example.com/agent:1
          env:
            {{- include "agent-watchdog.agentEnv" $wd | nindent 12 }}
      volumes:
        {{- include "agent-watchdog.sidecarVolumes" $wd | nindent 8 }}
"""

# The same Deployment the short way.
SHORT = """\
{{- define "agents.short" }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: short
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels:
        app: agent
    spec:
      containers:
        - name: agent
          image: registry.example.com/agent:1
{{- end }}
{{ include "agent-watchdog.inject" (list $ "agents.short") }}
"""

# A StatefulSet that already has an init container, volumes, env, a second container and its
# own OTLP endpoint.
STATEFULSET = """\
{{- define "agents.sts" }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: sts
spec:
  serviceName: sts
  selector:
    matchLabels: {app: sts}
  template:
    metadata:
      labels: {app: sts}
      annotations: {team: ml}
    spec:
      initContainers:
        - name: migrate
          image: registry.example.com/migrate:1
      containers:
        - name: agent
          image: registry.example.com/agent:1
          env:
            - name: OTEL_EXPORTER_OTLP_ENDPOINT
              value: http://otel-collector:4318
            - name: MODEL
              value: gpt
          volumeMounts:
            - {name: cache, mountPath: /cache}
        - name: proxy
          image: registry.example.com/proxy:1
      volumes:
        - name: cache
          emptyDir: {}
{{- end }}
{{ include "agent-watchdog.inject" (list $ "agents.sts") }}
"""

JOB = """\
{{- define "agents.job" }}
apiVersion: batch/v1
kind: Job
metadata:
  name: job
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: agent
          image: registry.example.com/agent:1
{{- end }}
{{ include "agent-watchdog.inject" (list $ "agents.job") }}
"""

CRONJOB = """\
{{- define "agents.cronjob" }}
apiVersion: batch/v1
kind: CronJob
metadata:
  name: cron
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: agent
              image: registry.example.com/agent:1
{{- end }}
{{ include "agent-watchdog.inject" (list $ "agents.cronjob") }}
"""

POD = """\
{{- define "agents.pod" }}
apiVersion: v1
kind: Pod
metadata:
  name: pod
spec:
  containers:
    - name: agent
      image: registry.example.com/agent:1
{{- end }}
{{ include "agent-watchdog.inject" (list $ "agents.pod" .Values.watchdog) }}
"""

TEMPLATES = {"long.yaml": LONG, "short.yaml": SHORT, "sts.yaml": STATEFULSET, "job.yaml": JOB,
             "cronjob.yaml": CRONJOB, "pod.yaml": POD}
WATCHDOG_VOLUMES = ["watchdog-state", "watchdog-tmp", "watchdog-rules"]


def agent_chart(tmp: Path, templates: dict[str, str]) -> Path:
    work = tmp / "agent-watchdog"
    shutil.copytree(CHART, work)
    chart = work / "examples" / "agents"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(CHART_YAML)
    for name, text in templates.items():
        (chart / "templates" / name).write_text(text)
    helm.dependency_update(chart, skip_refresh=True)
    return chart


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[helm.Chart]:
    with helm.Chart.load(agent_chart(tmp_path_factory.mktemp("inject"), TEMPLATES)) as chart:
        yield chart


def render(chart: helm.Chart, watchdog: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    rendered = chart.render({"watchdog": watchdog} if watchdog else None, name="agents",
                            namespace=NAMESPACE)
    return [doc for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def template_of(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "CronJob":
        return manifest["spec"]["jobTemplate"]["spec"]["template"]  # type: ignore[no-any-return]
    if manifest["kind"] == "Pod":
        return manifest
    return manifest["spec"]["template"]  # type: ignore[no-any-return]


def test_one_line_gives_what_the_named_templates_give(agents: helm.Chart) -> None:
    manifests = render(agents)
    validate(manifests)
    long, short = one(manifests, "Deployment", "long"), one(manifests, "Deployment", "short")
    assert short["spec"]["template"] == long["spec"]["template"]
    spec = pod_spec(short)
    [sidecar] = spec["initContainers"]
    assert sidecar["name"] == "watchdog" and sidecar["restartPolicy"] == "Always"
    assert [v["name"] for v in spec["volumes"]] == WATCHDOG_VOLUMES
    assert env_of(spec["containers"][0])["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
        "http://127.0.0.1:4318")


@pytest.mark.parametrize(("kind", "name"), [("Job", "job"), ("CronJob", "cron"),
                                            ("Pod", "pod"), ("StatefulSet", "sts")])
def test_every_workload_kind_gets_the_native_sidecar(agents: helm.Chart, kind: str,
                                                     name: str) -> None:
    template = template_of(one(render(agents), kind, name))
    spec = template["spec"]
    assert spec["initContainers"][0]["name"] == "watchdog"
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert [v["name"] for v in spec["volumes"]][-3:] == WATCHDOG_VOLUMES
    assert template["metadata"]["labels"]["agent-watchdog/sidecar"] == "agents-agent-watchdog"
    assert "checksum/agent-watchdog-secret" in template["metadata"]["annotations"]
    assert "WATCHDOG_URL" in env_of(spec["containers"][0])


def test_what_the_pod_already_has_is_kept(agents: helm.Chart) -> None:
    template = template_of(one(render(agents), "StatefulSet", "sts"))
    spec = template["spec"]
    # The watchdog starts first, so the existing init container's spans find it listening.
    assert [c["name"] for c in spec["initContainers"]] == ["watchdog", "migrate"]
    assert [v["name"] for v in spec["volumes"]] == ["cache", *WATCHDOG_VOLUMES]
    assert template["metadata"]["annotations"]["team"] == "ml"
    assert template["metadata"]["labels"]["app"] == "sts"
    agent, proxy = spec["containers"]
    env = env_of(agent)
    # A variable the container sets is its own (as the OpenTelemetry Operator does).
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert [e["name"] for e in agent["env"]].count("OTEL_EXPORTER_OTLP_ENDPOINT") == 1
    assert env["MODEL"] == "gpt" and env["WATCHDOG_URL"] == "http://127.0.0.1:9477"
    assert agent["volumeMounts"] == [{"name": "cache", "mountPath": "/cache"}]
    assert env_of(proxy)["WATCHDOG_URL"] == "http://127.0.0.1:9477"  # every container


def test_agent_containers_limits_the_env(agents: helm.Chart) -> None:
    manifests = render(agents, {"sidecar": {"agentContainers": ["agent"]}})
    validate(manifests)
    agent, proxy = pod_spec(one(manifests, "StatefulSet", "sts"))["containers"]
    assert "WATCHDOG_URL" in env_of(agent)
    assert "env" not in proxy


def test_older_clusters_get_a_plain_sidecar_container(agents: helm.Chart) -> None:
    manifests = render(agents, {"sidecar": {"native": False}})
    validate(manifests)
    spec = pod_spec(one(manifests, "StatefulSet", "sts"))
    assert [c["name"] for c in spec["initContainers"]] == ["migrate"]
    assert [c["name"] for c in spec["containers"]] == ["agent", "proxy", "watchdog"]
    assert "restartPolicy" not in spec["containers"][2]


def test_gateway_mode_adds_only_the_env(agents: helm.Chart) -> None:
    manifests = render(agents, {"mode": "gateway", "auth": {"existingSecret": TOKEN_SECRET}})
    validate(manifests)
    short = one(manifests, "Deployment", "short")
    spec = pod_spec(short)
    assert "initContainers" not in spec and "volumes" not in spec
    assert "agent-watchdog/sidecar" not in short["spec"]["template"]["metadata"]["labels"]
    env = env_of(spec["containers"][0])
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
        f"http://agents-agent-watchdog.{NAMESPACE}.svc:4318")
    assert env["WATCHDOG_API_TOKEN"] == {"secretKeyRef": {"name": TOKEN_SECRET,
                                                          "key": "api-token"}}


@pytest.mark.parametrize(("template", "message"), [
    ("{{- define \"agents.svc\" }}\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
     "{{- end }}\n{{ include \"agent-watchdog.inject\" (list $ \"agents.svc\") }}\n",
     "renders a Service; it takes a Deployment"),
    ("{{- define \"agents.bad\" }}\nkind: [\n{{- end }}\n"
     "{{ include \"agent-watchdog.inject\" (list $ \"agents.bad\") }}\n",
     "template agents.bad is not one YAML manifest"),
])
def test_what_it_cannot_inject_into_is_refused(tmp_path: Path, template: str,
                                               message: str) -> None:
    with helm.Chart.load(agent_chart(tmp_path, {"bad.yaml": template})) as chart, \
            pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(chart)


def test_the_readme_counts_the_lines_the_example_adds() -> None:
    """examples/my-agent's Deployment is a plain manifest plus the lines marked "watchdog";
    the README says how many of the agent chart's lines are in its template (the whole count,
    Chart.yaml and values.yaml too, is tests/test_docs.py's)."""
    example = (EXAMPLE / "templates" / "deployment.yaml").read_text().splitlines()
    added = [line for line in example if "watchdog" in line
             and not re.fullmatch(r"\s*\{\{-?\s*/\*.*\*/\s*-?\}\}", line)]
    assert [line.split("}}")[0] for line in added] == [
        '{{- define "my-agent.deployment" ', "{{- end ",
        '{{ include "agent-watchdog.inject" (list $ "my-agent.deployment") ']
    plain = [line for line in example if line not in added and "watchdog" not in line]
    assert yaml.safe_load("\n".join(plain).replace("{{", "#").replace("}}", ""))["kind"] == (
        "Deployment")
    assert f"and {len(added)} in the workload template" in README.read_text()
