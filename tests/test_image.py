"""The container image, as `make dist` writes it (dist/agent-watchdog-sidecar-VERSION-image.tar,
built by buildah from the repository's Dockerfile: tools/image.py), loaded by podman and run
read-only as uid 65532 (one container for the module); a real OTLP exporter sends it spans over
gRPC and HTTP and its control API shows the runs.

``make dist`` runs once per test session (tests/test_dist.py), so ``make test`` builds the image
once. No registry is reachable here: tools/image.py makes the base itself (debootstrap), and
buildah caches the build's layers: a new sidecar wheel with the same dependencies builds only
the image's last layer.

Everything is a Debian package that ``make system-deps`` installs (buildah, podman, runc,
debootstrap) and needs root, as ``make test`` runs in CI. Podman runs with runc and cgroupfs
(crun refuses this machine's hybrid cgroup layout) and explicit ulimits at or below the host's
(the sandbox has no CAP_SYS_RESOURCE to raise them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.harness import http_request, run_detail, wait_until
from tests.ports import free_port
from tests.processes import answers
from tests.test_dist import MAKE_SECONDS, VERSION, artifacts

WATCHDOG_UID = 65532
STATE_DIR = "/var/lib/watchdog"
LOAD_SECONDS = 300
START_SECONDS = 30
pytestmark = pytest.mark.timeout(MAKE_SECONDS)  # the first test may run make dist
# podman on this machine: see the module docstring.
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
ULIMITS = ("--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        pytest.fail(f"{name} is not installed: `make test` installs it (make system-deps)")
    return found


def podman(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([tool(PODMAN[0]), *PODMAN[1:], *args], capture_output=True,
                          text=True, timeout=timeout)
    if check and done.returncode != 0:
        pytest.fail(f"podman {' '.join(args)} exited {done.returncode}:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


@dataclass(frozen=True)
class Loaded:
    image: str
    load_seconds: float


@pytest.fixture(scope="module")
def image() -> Loaded:
    """The archive of dist/ loaded into podman's storage: the name it carries, and the image is
    the one its manifest names by ID (another build's image may carry the same name)."""
    archive = artifacts().image_archive
    with tarfile.open(archive) as tar:
        manifest = tar.extractfile("manifest.json")
        assert manifest is not None, f"{archive} has no manifest.json"
        [entry] = json.load(manifest)
    image_id = entry["Config"].removesuffix(".json")
    start = time.monotonic()
    output = podman("load", "--input", str(archive), timeout=LOAD_SECONDS).stdout
    names = [line.split(":", 1)[1].strip() for line in output.splitlines()
             if line.startswith("Loaded image")]
    name = f"agent-watchdog-sidecar:{VERSION}"
    assert f"docker.io/library/{name}" in names, output  # what `docker load` names it
    [found] = json.loads(podman("image", "inspect", image_id).stdout)
    assert f"docker.io/library/{name}" in found["RepoTags"], found["RepoTags"]
    loaded = Loaded(image_id, time.monotonic() - start)
    print(f"\nimage: {archive.name} loaded in {loaded.load_seconds:.1f}s")
    return loaded


def inspect(image: Loaded) -> dict[str, Any]:
    [found] = json.loads(podman("image", "inspect", image.image).stdout)
    return found  # type: ignore[no-any-return]


# -- the running container ------------------------------------------------------------------

def container_logs(name: str) -> str:
    logs = podman("logs", name, check=False)
    return logs.stdout + logs.stderr


@dataclass(frozen=True)
class Running:
    name: str
    state: Path
    ports: dict[str, int]

    def url(self, port: str) -> str:
        return f"http://127.0.0.1:{self.ports[port]}"


@pytest.fixture(scope="module")
def container(image: Loaded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """The image as a Kubernetes pod runs it: read-only root, uid 65532, the state on a volume
    owned by that uid, /tmp a tmpfs; the host's network (ports chosen free here). One container
    for the module's tests: the last one stops it."""
    state = tmp_path_factory.mktemp("container") / "state"
    state.mkdir()
    os.chown(state, WATCHDOG_UID, WATCHDOG_UID)
    ports = {key: free_port() for key in ("otlp_grpc", "otlp_http", "api", "metrics")}
    name = f"watchdog-test-{uuid.uuid4().hex[:8]}"
    env = [arg for key, port in ports.items()
           for arg in ("--env", f"WATCHDOG_{key.upper()}_ADDRESS=127.0.0.1:{port}")]
    podman("run", "--detach", "--name", name, "--read-only", "--user",
           f"{WATCHDOG_UID}:{WATCHDOG_UID}", "--tmpfs", "/tmp", "--volume",
           f"{state}:{STATE_DIR}", "--network", "host", *ULIMITS, *env, image.image)
    running = Running(name, state, ports)
    try:
        wait_until(lambda: answers(running.url("metrics") + "/readyz"),
                   lambda: f"/readyz; the container's logs:\n{container_logs(name)}",
                   timeout=START_SECONDS, every=0.2)
        yield running
    finally:
        podman("rm", "--force", "--time", "5", name, check=False)


def export_one_span(exporter: SpanExporter, run_id: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "image-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("image-test").start_span("invoke_agent explorer", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "explorer",
        "watchdog.run.id": run_id})
    span.end()
    provider.shutdown()


# -- the tests ------------------------------------------------------------------------------

def test_the_image_is_configured_for_a_restricted_pod(image: Loaded) -> None:
    inspected = inspect(image)
    config = inspected["Config"]
    assert config["User"] == f"{WATCHDOG_UID}:{WATCHDOG_UID}"
    assert (config["Entrypoint"], config["Cmd"]) == (["watchdog"], ["serve"])
    assert set(config["ExposedPorts"]) == {f"{p}/tcp" for p in (4317, 4318, 9464, 9477, 9478)}
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["PATH"].startswith("/opt/watchdog/bin:")
    assert env["WATCHDOG_STATE_DIR"] == STATE_DIR
    # Docker format (buildah's default OCI format would drop HEALTHCHECK).
    assert inspected["Healthcheck"]["Test"][:2] == ["CMD", "python"]
    assert "WATCHDOG_METRICS_ADDRESS" in inspected["Healthcheck"]["Test"][-1]
    assert config["Labels"]["org.opencontainers.image.version"] == VERSION


def test_a_new_sidecar_wheel_is_a_small_last_layer(image: Loaded) -> None:
    """The dependencies' venv is one layer and the sidecar's wheel the last: a build with a new
    wheel and the same dependencies makes only that small layer again."""
    history = json.loads(podman("history", "--no-trunc", "--format", "json", image.image).stdout)
    layers = [(step["CreatedBy"], step["size"]) for step in reversed(history) if step["size"]]
    [dependencies] = [size for step, size in layers if "/opt/watchdog.dependencies.txt" in step
                      and "pip" in step]
    step, sidecar = layers[-1]
    assert "--no-deps -r /opt/watchdog.sidecar.txt" in step, layers
    assert sidecar < dependencies / 4, layers


# What the process in the container is and may do, asked in one `podman exec`.
PROCESS = """import errno, importlib.util, json, os
from watchdog.core.spans import native
native.use_native(True)  # loaded now (a sidecar loads it with its first protobuf request)
def write(path):
    try:
        with open(path, "w"):
            return "written"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "venv": write("/opt/watchdog/x"),
                  "etc": write("/etc/x"), "tmp": write("/tmp/x"),
                  "pip": importlib.util.find_spec("pip") is not None,
                  "decode": native.native_state()}))"""


def test_runs_read_only_as_65532_and_is_ready(container: Running) -> None:
    status, body = http_request("GET", container.url("metrics") + "/readyz")
    assert (status, body.strip()) == (200, b"ready")
    process = json.loads(podman("exec", container.name, "python", "-c", PROCESS).stdout)
    assert process == {
        "uid": WATCHDOG_UID, "gid": WATCHDOG_UID,
        # nothing is writable but the state volume and /tmp (the root file system is read-only)
        "venv": "EROFS", "etc": "EROFS", "tmp": "written",
        "pip": False,  # pip is not in the venv
        # the image's sidecar reads OTLP protobuf with the compiled decode make dist's wheel
        # carries
        "decode": "on"}, process
    status, metrics = http_request("GET", container.url("metrics") + "/metrics")
    assert f'agent_watchdog_build_info{{version="{VERSION}"}} 1.0'.encode() in metrics


# What the image's interpreter says of itself and of its venv, for the markers of requirements.
INSTALLED = """import importlib.metadata as m, json, os, platform, sys
print(json.dumps({"environment": {
    "python_version": "%d.%d" % sys.version_info[:2],
    "python_full_version": platform.python_version(), "os_name": os.name,
    "sys_platform": sys.platform, "platform_system": platform.system(),
    "platform_machine": platform.machine(), "implementation_name": sys.implementation.name,
    "platform_python_implementation": platform.python_implementation()},
    "distributions": [[d.metadata["Name"], d.version, d.requires or []]
                      for d in m.distributions()]}))"""


def test_the_venv_meets_every_requirement(container: Running) -> None:
    """The dependencies' layer is made from the list the image build reads from the sidecar's
    wheel, and the sidecar goes in --no-deps: every requirement of every distribution in the
    venv is met, as `pip check` would say (the image has no pip to ask)."""
    found = json.loads(podman("exec", container.name, "python", "-c", INSTALLED).stdout)
    installed = {canonicalize_name(name): Version(version)
                 for name, version, _ in found["distributions"]}
    assert installed[canonicalize_name("agent-watchdog-sidecar")] == Version(VERSION)
    environment = {**found["environment"], "extra": ""}
    unmet = []
    for name, _, requires in found["distributions"]:
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate(environment):
                continue
            have = installed.get(canonicalize_name(requirement.name))
            if have is None or not requirement.specifier.contains(have, prereleases=True):
                unmet.append(f"{name} requires {text}; installed: {have}")
    assert not unmet, unmet
    assert len(installed) > 20, sorted(installed)  # the sidecar and its dependencies


def test_a_span_over_each_protocol_becomes_a_run(container: Running) -> None:
    """Last in the module: it stops the shared container."""
    grpc_run, http_run = f"image-grpc-{uuid.uuid4().hex[:6]}", f"image-http-{uuid.uuid4().hex[:6]}"
    export_one_span(GrpcSpanExporter(endpoint=f"127.0.0.1:{container.ports['otlp_grpc']}",
                                     insecure=True), grpc_run)
    export_one_span(HttpSpanExporter(endpoint=container.url("otlp_http") + "/v1/traces"),
                    http_run)
    api = container.url("api")
    for run_id in (grpc_run, http_run):
        detail = wait_until(lambda r=run_id: run_detail(api, r), timeout=10, what=run_id)
        assert detail["agent"] == "explorer", detail
        assert detail["state"] == "ended", detail  # the agent span ended the run
    # A clean stop on SIGTERM, and the state was written to the volume by uid 65532.
    podman("stop", "--time", "10", container.name)
    inspected = json.loads(podman("container", "inspect", container.name).stdout)[0]
    assert inspected["State"]["ExitCode"] == 0, inspected["State"]
    files = list(container.state.iterdir())
    assert files and all(f.stat().st_uid == WATCHDOG_UID for f in files), files
