"""The release artifacts that ``make dist`` writes into dist/, checked as a user meets them:
the names against PyPI, the wheels installed by pip into clean venvs (the client next to the
filesystem-events library ``watchdog``, both orders), the sdists, the image archive and the
chart package.

``make dist`` runs once per test session (:func:`make_dist`): tests/test_image.py runs the image
archive it wrote, tests/test_helm_chart.py renders the chart package, so ``make test`` builds the
image once. Run alone, test_helm_chart.py makes only the chart (``make dist-chart``).

PyPI is asked for real (its JSON API): a name of ours found there fails, and so does a PyPI
that does not answer. Dependencies are resolved and installed by pip from the configured index.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
CHART = ROOT / "helm" / "agent-watchdog"
MAKE_SECONDS = 1800  # cold: the image's base (debootstrap) and every dependency's wheel
PIP_SECONDS = 300
PYPI = "https://pypi.org/pypi/{}/json"
# What the sidecar needs and an agent's environment must not get from the client.
SIDECAR_ONLY = {"grpcio", "aiohttp", "cel-expr-python", "prometheus-client", "pyyaml"}

# The first test to ask runs make dist, and the clean-clone test runs it again: more than the
# suite's default timeout when the image is built cold.
pytestmark = pytest.mark.timeout(2 * MAKE_SECONDS)

_made: set[str] = set()


def make_dist(target: str = "dist") -> None:
    """``make TARGET`` once per session; ``dist`` makes every part, so it covers the others.

    Parallel test workers (pytest-xdist) share the session: a lock on the repository's
    ``.make-dist.lock`` lets one worker make it while the others wait, and a note of the
    session's run id says it is made (two builds in one tree at once break each other).
    When the checkout holds nothing but its commit (a clean clone, as CI has), ``dist`` is
    made in a fresh clone of it and its artifacts moved into dist/: the one build is also
    :func:`test_make_dist_from_a_clean_clone`'s."""
    if target in _made or "dist" in _made:
        return
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    with open(ROOT / ".make-dist.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        done_here = {line.strip() for line in lock}
        if run is not None and ({f"{run} {target}", f"{run} dist", f"{run} dist clean-clone"}
                                & done_here):
            _made.add(target)
            _made.update({"clean-clone"} & {line.split()[-1] for line in done_here
                                            if line.startswith(f"{run} dist ")})
            return
        start = time.monotonic()
        if target == "dist" and only_the_commit():
            made_in_a_clean_clone()
            target = "dist clean-clone"
            _made.add("clean-clone")
        else:
            done = subprocess.run(["make", "--no-print-directory", target], cwd=ROOT,
                                  capture_output=True, text=True, timeout=MAKE_SECONDS)
            if done.returncode != 0:
                pytest.fail(f"make {target} exited {done.returncode}:\n{done.stdout[-4000:]}\n"
                            f"{done.stderr[-4000:]}")
        print(f"\nmake {target}: {time.monotonic() - start:.1f}s")
        if run is not None:
            lock.write(f"{run} {target}\n")
    _made.add(target.split()[0])


def only_the_commit() -> bool:
    """Whether the checkout is its commit and nothing else (no change, no untracked file)."""
    done = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    return done.returncode == 0 and not done.stdout.strip()


def clean_clone_dist(clone: Path) -> dict[str, int]:
    """``make dist`` in a fresh clone of the checkout's commit at ``clone`` (its own
    .venvs/dist; the image's base and layers from the checkout's caches): what it made, and
    how large."""
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(clone)],
                   check=True, timeout=120)
    env = {**os.environ, "WATCHDOG_IMAGE_CACHE": str(ROOT / ".cache" / "image")}
    done = subprocess.run(["make", "--no-print-directory", "dist"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=MAKE_SECONDS)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return {p.name: p.stat().st_size for p in (clone / "dist").iterdir()}


def made_in_a_clean_clone() -> None:
    """dist/ becomes what ``make dist`` made in a clean clone (each file replaced at once:
    another worker may be reading the chart package)."""
    clone = ROOT / ".cache" / "dist-clone"  # on dist/'s file system: the files are moved
    shutil.rmtree(clone, ignore_errors=True)
    try:
        made = clean_clone_dist(clone)
        DIST.mkdir(exist_ok=True)
        for name in made:
            os.replace(clone / "dist" / name, DIST / name)
        for stale in set(os.listdir(DIST)) - set(made):
            path = DIST / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def one(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    assert len(found) == 1, f"dist/{pattern}: {[p.name for p in found]}"
    return found[0]


def packaged_chart() -> Path:
    make_dist("dist-chart")
    return one(f"{CHART.name}-*.tgz")


@dataclass(frozen=True)
class Dist:
    sidecar_sdist: Path
    sidecar_wheel: Path
    client_sdist: Path
    client_wheel: Path
    image_archive: Path
    chart: Path


def artifacts() -> Dist:
    make_dist()
    return Dist(one("agent_watchdog_sidecar-*.tar.gz"), one("agent_watchdog_sidecar-*.whl"),
                one("agent_watchdog_client-*.tar.gz"), one("agent_watchdog_client-*.whl"),
                one("agent-watchdog-sidecar-*-image.tar"), one(f"{CHART.name}-*.tgz"))


@pytest.fixture(scope="module")
def dist() -> Dist:
    return artifacts()


def project_version(pyproject: Path) -> str:
    import tomllib
    version: str = tomllib.loads(pyproject.read_text())["project"]["version"]
    return version


VERSION = project_version(ROOT / "pyproject.toml")


# -- wheels and pip -------------------------------------------------------------------------

def wheel_metadata(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    fields: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(": ")
        if sep and not line.startswith(" "):
            fields.setdefault(key, []).append(value)
    return fields


def top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist()
                if not name.split("/")[0].endswith((".dist-info", ".data"))}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Venv:
    """A clean venv (no pip of its own) driven by this interpreter's pip, as a user would."""

    def __init__(self, path: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                       timeout=60)
        self.path = path
        self.python = path / "bin" / "python"

    def pip(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python),
                               *args], capture_output=True, text=True, timeout=PIP_SECONDS)
        if done.returncode != 0:
            pytest.fail(f"pip {' '.join(args)} exited {done.returncode}:\n"
                        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=60,
                              cwd=self.path)  # not the checkout: nothing imported from it

    def imports(self, module: str) -> bool:
        return self.run(str(self.python), "-c", f"import {module}").returncode == 0

    def resolved(self, requirement: str) -> set[str]:
        """What pip would install for the requirement into this venv (nothing installed)."""
        report = self.path / "report.json"
        self.pip("install", "--quiet", "--dry-run", "--report", str(report), requirement)
        return {canonical(item["metadata"]["name"])
                for item in json.loads(report.read_text())["install"]}


# -- from a clean clone ---------------------------------------------------------------------

def test_make_dist_from_a_clean_clone(dist: Dist, tmp_path: Path) -> None:
    """The committed tree alone makes every artifact: ``make dist`` in a fresh clone (its own
    .venvs/dist; the image's base and layers come from the caches the checkout's build left).
    A checkout that holds only its commit had its dist/ made that way (:func:`make_dist`);
    another makes it again here."""
    if "clean-clone" in _made:
        made = {p.name: p.stat().st_size for p in DIST.iterdir()}
    else:
        try:
            made = clean_clone_dist(tmp_path / "clone")
        finally:
            shutil.rmtree(tmp_path / "clone" / "dist", ignore_errors=True)  # the image is large
    expected = [getattr(dist, field).name for field in Dist.__dataclass_fields__]
    assert sorted(made) == sorted(expected)
    assert all(size > 0 for size in made.values()), made


# -- names ----------------------------------------------------------------------------------

def on_pypi(name: str) -> bool:
    try:
        with urllib.request.urlopen(PYPI.format(name), timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        pytest.fail(f"PyPI answered {exc.code} for {name}: the check cannot be made")
    except OSError as exc:
        pytest.fail(f"PyPI did not answer for {name}: {exc}")
    return canonical(body["info"]["name"]) == canonical(name)


def test_no_name_of_ours_is_on_pypi(dist: Dist) -> None:
    ours = {canonical(wheel_metadata(wheel)["Name"][0])
            for wheel in (dist.sidecar_wheel, dist.client_wheel)}
    assert ours == {"agent-watchdog-sidecar", "agent-watchdog-client"}
    # the client's import name, as a distribution name, too
    ours |= {canonical(package) for package in top_level(dist.client_wheel)}
    assert [name for name in sorted(ours) if on_pypi(name)] == []
    # the check sees names that are taken: the unrelated project and the filesystem library
    assert on_pypi("agent-watchdog") and on_pypi("watchdog")


def test_the_wheels_top_level_packages(dist: Dist) -> None:
    assert top_level(dist.client_wheel) == {"agent_watchdog_client"}
    assert top_level(dist.sidecar_wheel) == {"watchdog"}
    with zipfile.ZipFile(dist.client_wheel) as archive:
        names = archive.namelist()
    # the C span path is built (a platform wheel); its source stays in the sdist
    assert any(re.fullmatch(r"agent_watchdog_client/_spanpath\..*\.so", n) for n in names)
    assert not any(n.endswith(".c") for n in names)
    assert re.fullmatch(rf"agent_watchdog_client-{re.escape(VERSION)}-cp3\d+-cp3\d+-\w+\.whl",
                        dist.client_wheel.name)
    # the sidecar's compiled parts (Rust) are built too, on Python's stable ABI: one wheel for
    # every CPython from 3.11 (an image's Python may be another); their source in the sdist
    assert re.fullmatch(rf"agent_watchdog_sidecar-{re.escape(VERSION)}-cp311-abi3-\w+\.whl",
                        dist.sidecar_wheel.name), dist.sidecar_wheel.name
    with zipfile.ZipFile(dist.sidecar_wheel) as archive:
        names = archive.namelist()
    assert {"watchdog/core/spans/_native.abi3.so", "watchdog/shell/model/_relay.abi3.so"} \
        <= set(names)
    # the license the metadata names, in every artifact
    for wheel, project in ((dist.sidecar_wheel, "agent_watchdog_sidecar"),
                           (dist.client_wheel, "agent_watchdog_client")):
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read(f"{project}-{VERSION}.dist-info/licenses/LICENSE").decode()
            assert "License-Expression: Apache-2.0" in archive.read(
                f"{project}-{VERSION}.dist-info/METADATA").decode()
        assert "Apache License" in text and "Version 2.0" in text
    assert "watchdog/core/spans/_native.pyi" in names and not any(n.endswith(".rs")
                                                                   for n in names)


# -- the client's dependency tree -----------------------------------------------------------

def test_the_client_pulls_none_of_the_sidecars_libraries(dist: Dist, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    client = venv.resolved(str(dist.client_wheel))
    assert {"agent-watchdog-client", "opentelemetry-api", "opentelemetry-sdk"} <= client
    assert client & SIDECAR_ONLY == set(), client
    # with the exporter Watchdog.setup_tracing() sets up: still none of them
    with_otlp = venv.resolved(f"{dist.client_wheel}[otlp]")
    assert "opentelemetry-exporter-otlp-proto-http" in with_otlp
    assert with_otlp & SIDECAR_ONLY == set(), with_otlp
    # the same resolution sees them all in the sidecar's tree
    assert venv.resolved(str(dist.sidecar_wheel)) >= SIDECAR_ONLY


def test_the_client_declares_the_opentelemetry_api_and_sdk_only(dist: Dist) -> None:
    requires = wheel_metadata(dist.client_wheel)["Requires-Dist"]
    base = sorted(canonical(re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0])
                  for r in requires if "extra ==" not in r)
    assert base == ["opentelemetry-api", "opentelemetry-sdk"]
    extras = set(wheel_metadata(dist.client_wheel)["Provides-Extra"])
    assert {"otlp", "pydantic-ai", "openai-agents", "langchain", "smolagents",
            "hermes"} <= extras


# -- coexistence with the filesystem-events library `watchdog` ------------------------------

FILESYSTEM = "watchdog"  # the PyPI project google-adk and strands install
BOTH = ("import watchdog.observers, agent_watchdog_client; "
        "print(watchdog.observers.Observer.__module__, agent_watchdog_client.Watchdog.__name__)")


@pytest.mark.parametrize("order", ["filesystem-first", "client-first"])
def test_the_client_and_the_filesystem_watchdog_coexist(dist: Dist, tmp_path: Path,
                                                        order: str) -> None:
    venv = Venv(tmp_path / "venv")
    installs: dict[str, Callable[[], str]] = {
        "filesystem": lambda: venv.pip("install", "--quiet", FILESYSTEM),
        "client": lambda: venv.pip("install", "--quiet", str(dist.client_wheel))}
    modules = {"filesystem": "watchdog.observers", "client": "agent_watchdog_client"}
    names = {"filesystem": FILESYSTEM, "client": "agent-watchdog-client"}
    first, second = ("filesystem", "client") if order == "filesystem-first" else (
        "client", "filesystem")
    installs[first]()
    installs[second]()
    both = venv.run(str(venv.python), "-c", BOTH)
    assert both.returncode == 0, both.stderr
    assert both.stdout.split()[1] == "Watchdog"
    venv.pip("check")
    # uninstalling either leaves the other importable (and itself gone)
    for removed, kept in ((first, second), (second, first)):
        venv.pip("uninstall", "--yes", "--quiet", names[removed])
        assert venv.imports(modules[kept]), f"{kept} after uninstalling {removed}"
        assert not venv.imports(modules[removed])
        installs[removed]()
        assert venv.run(str(venv.python), "-c", BOTH).returncode == 0


# -- the sidecar ----------------------------------------------------------------------------

def test_the_sidecar_wheel_installs_and_runs(dist: Dist, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--quiet", str(dist.sidecar_wheel))
    version = venv.run(str(venv.path / "bin" / "watchdog"), "--version")
    assert version.returncode == 0, version.stderr
    assert VERSION in version.stdout
    # the default rule pack is package data, and it checks clean where it was installed
    found = venv.run(str(venv.python), "-c", "import watchdog; print(watchdog.__file__)")
    pack = Path(found.stdout.strip()).parent / "core" / "rules" / "packs" / "default.yaml"
    check = venv.run(str(venv.path / "bin" / "watchdog"), "rules", "check", "--no-default",
                     str(pack))
    assert check.returncode == 0, check.stdout + check.stderr
    assert not venv.imports("agent_watchdog_client")  # the sidecar does not install the client
    native = venv.run(str(venv.python), "-c", "from watchdog.core.spans import native; "
                      "native.use_native(True); print(native.native_state())")  # (loaded)
    assert native.stdout.strip() == "on", native.stdout + native.stderr  # the compiled decode


def test_the_sidecar_runs_next_to_the_filesystem_watchdog(dist: Dist, tmp_path: Path) -> None:
    """Installed after the sidecar into its venv (an agent framework that needs it), the
    filesystem-events library writes its empty ``watchdog/__init__.py`` over the sidecar's:
    the sidecar still runs, both import, and ``watchdog serve`` says at start that they share
    the package (the README gives the sidecar a venv of its own). Uninstalled, it takes that
    ``__init__.py`` with it, and the sidecar runs on."""
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--quiet", str(dist.sidecar_wheel))
    venv.pip("install", "--quiet", FILESYSTEM)
    command = str(venv.path / "bin" / "watchdog")
    version = venv.run(command, "--version")
    assert version.returncode == 0 and VERSION in version.stdout, version.stderr
    assert venv.imports("watchdog.observers")
    serve = subprocess.Popen(
        [command, "serve", "--state-dir", ":memory:", "--otlp-grpc-address", "off",
         "--otlp-http-address", "127.0.0.1:0", "--api-address", "127.0.0.1:0",
         "--metrics-address", "127.0.0.1:0", "--rules-watch-interval", "0"],
        cwd=venv.path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert serve.stderr is not None
        for line in serve.stderr:  # (the test's timeout bounds a sidecar that says nothing)
            lines.append(line)
            if "OTLP protobuf decode" in line:
                lines.append(serve.stderr.readline())
                break
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    assert any("listening" in line for line in lines), lines
    warning = lines[-1]
    assert "WARNING" in warning and "filesystem-events library watchdog" in warning, lines
    assert "a venv of its own" in warning
    venv.pip("uninstall", "--yes", "--quiet", FILESYSTEM)
    version = venv.run(command, "--version")
    assert version.returncode == 0 and VERSION in version.stdout, version.stderr


# -- sdists ---------------------------------------------------------------------------------

def sdist_members(sdist: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(sdist) as archive:
        return {member.name.split("/", 1)[1]: member for member in archive.getmembers()
                if "/" in member.name}


def test_the_sdists_hold_what_their_wheels_are_built_from(dist: Dist) -> None:
    assert dist.sidecar_sdist.name == f"agent_watchdog_sidecar-{VERSION}.tar.gz"
    assert dist.client_sdist.name == f"agent_watchdog_client-{VERSION}.tar.gz"
    client = sdist_members(dist.client_sdist)
    for name in ("pyproject.toml", "setup.py", "README.md", "agent_watchdog_client/_spanpath.c",
                 "agent_watchdog_client/py.typed"):
        assert name in client, name
    assert not [n for n in client if n.startswith("watchdog/")]
    sidecar = sdist_members(dist.sidecar_sdist)
    pack = sidecar["watchdog/core/rules/packs/default.yaml"]
    assert pack.isfile()  # the repository's symlink, resolved
    with tarfile.open(dist.sidecar_sdist) as archive:
        extracted = archive.extractfile(pack)
        assert extracted is not None
        assert extracted.read() == (ROOT / "rules" / "default.yaml").read_bytes()
    assert "watchdog/shell/cli.py" in sidecar and "watchdog/py.typed" in sidecar
    for name in ("native/Cargo.toml", "native/Cargo.lock", "native/otlp/Cargo.toml",
                 "native/otlp/src/wire.rs", "native/otlp/src/python.rs"):
        assert name in sidecar, name
    assert not [n for n in sidecar if n.startswith("native/target/")]
    assert not [n for n in sidecar if n.startswith(("tests/", "client/", "agent_watchdog_client"))]


# -- the image archive and the chart package ------------------------------------------------

def test_the_image_archive_names_the_image_and_its_version(dist: Dist) -> None:
    assert dist.image_archive.name == f"agent-watchdog-sidecar-{VERSION}-image.tar"
    with tarfile.open(dist.image_archive) as archive:
        manifest_file = archive.extractfile("manifest.json")
        assert manifest_file is not None
        [manifest] = json.load(manifest_file)
        config_file = archive.extractfile(manifest["Config"])
        assert config_file is not None
        config = json.load(config_file)["config"]
    # `docker load` names it agent-watchdog-sidecar:VERSION; podman finds that short name too
    assert set(manifest["RepoTags"]) <= {f"{registry}/agent-watchdog-sidecar:{VERSION}"
                                         for registry in ("docker.io/library", "localhost")}
    assert f"docker.io/library/agent-watchdog-sidecar:{VERSION}" in manifest["RepoTags"]
    assert config["Labels"]["org.opencontainers.image.version"] == VERSION
    assert config["Labels"]["org.opencontainers.image.title"] == "agent-watchdog-sidecar"
    assert (config["Entrypoint"], config["Cmd"]) == (["watchdog"], ["serve"])


def test_the_chart_package_is_laid_out_as_helm_packages_it(dist: Dist) -> None:
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert dist.chart.name == f"{chart_yaml['name']}-{chart_yaml['version']}.tgz"
    with tarfile.open(dist.chart) as archive:
        names = archive.getnames()
        packaged = archive.extractfile(f"{chart_yaml['name']}/Chart.yaml")
        assert packaged is not None
        assert yaml.safe_load(packaged) == chart_yaml
    assert names[0] == f"{chart_yaml['name']}/Chart.yaml"
    assert {n.split("/")[0] for n in names} == {chart_yaml["name"]}
    for name in ("values.yaml", "values.schema.json", "templates/_sidecar.tpl",
                 "alerts/agent-watchdog.yaml", "dashboards/agent-watchdog.json"):
        assert f"{chart_yaml['name']}/{name}" in names, name
    # .helmignore applies: the example agent chart is documentation, not part of the package
    assert not [n for n in names if "/examples/" in n]


def test_the_charts_default_image_is_the_image_archive(dist: Dist) -> None:
    """What the chart runs by default is what `docker load` of the archive names."""
    with tarfile.open(dist.chart) as archive:
        values_file = archive.extractfile(f"{CHART.name}/values.yaml")
        chart_file = archive.extractfile(f"{CHART.name}/Chart.yaml")
        assert values_file is not None and chart_file is not None
        repository = yaml.safe_load(values_file)["image"]["repository"]
        app_version = yaml.safe_load(chart_file)["appVersion"]
    assert f"{repository}:{app_version}" == f"agent-watchdog-sidecar:{VERSION}"
