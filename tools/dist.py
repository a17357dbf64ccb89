"""The release artifacts, into dist/: what ``make dist`` runs.

    python tools/dist.py python   # sdist and wheel of agent-watchdog-sidecar and of
                                  # agent-watchdog-client (python -m build: each wheel is
                                  # built from its sdist, in an isolated environment)
    python tools/dist.py image    # the container image as a Docker archive (tools/image.py)
    python tools/dist.py chart    # the Helm chart packaged as `helm package` does (Helm's
                                  # library through helm-python-sdk; .helmignore applies)
    python tools/dist.py all

Each part first removes what it wrote before (another version's files included), so dist/
holds one set. The names:

    agent_watchdog_sidecar-VERSION.tar.gz, agent_watchdog_sidecar-VERSION-py3-none-any.whl
    agent_watchdog_client-VERSION.tar.gz, agent_watchdog_client-VERSION-cpXY-cpXY-PLATFORM.whl
    agent-watchdog-sidecar-VERSION-image.tar   (loads as agent-watchdog-sidecar:VERSION)
    agent-watchdog-CHART_VERSION.tgz
"""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

import image

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
CLIENT = ROOT / "client"
CHART = ROOT / "helm" / "agent-watchdog"
IMAGE_NAME = "agent-watchdog-sidecar"
BUILD_SECONDS = 600  # one distribution: an isolated build environment, sdist, then wheel


class DistError(Exception):
    """A part could not be built; the message says which and why."""


def version(project: Path) -> str:
    with (project / "pyproject.toml").open("rb") as file:
        found: str = tomllib.load(file)["project"]["version"]
        return found


def clear(*patterns: str) -> None:
    for pattern in patterns:
        for path in DIST.glob(pattern):
            path.unlink()


def python_dists() -> None:
    clear("agent_watchdog_sidecar-*", "agent_watchdog_client-*")
    for project in (ROOT, CLIENT):
        command = [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(DIST),
                   str(project)]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=BUILD_SECONDS)
        except subprocess.TimeoutExpired as exc:
            raise DistError(f"building {project} took longer than {BUILD_SECONDS}s") from exc
        if done.returncode != 0:
            raise DistError(f"{' '.join(command[1:])} exited {done.returncode} "
                            f"(tools/dist-requirements.txt lists `build`):\n"
                            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def container_image() -> None:
    clear(f"{IMAGE_NAME}-*-image.tar")
    tag = version(ROOT)
    if image.main(["--tag", f"localhost/{IMAGE_NAME}:{tag}", "--version", tag,
                   "--archive", str(DIST / f"{IMAGE_NAME}-{tag}-image.tar")]) != 0:
        raise DistError("the container image was not built (above: why)")


def chart_package() -> None:
    try:
        import helm_python
    except ImportError as exc:
        raise DistError("helm-python-sdk is not installed: tools/dist-requirements.txt "
                        "lists it (make dist installs it in .venvs/dist)") from exc
    clear(f"{CHART.name}-*.tgz")
    DIST.mkdir(exist_ok=True)
    try:
        helm_python.package(CHART, destination=DIST)
    except helm_python.HelmError as exc:
        raise DistError(f"packaging {CHART}: {exc}") from exc


PARTS: dict[str, Callable[[], None]] = {
    "python": python_dists, "image": container_image, "chart": chart_package}


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in (*PARTS, "all"):
        print(f"usage: python tools/dist.py {{{','.join((*PARTS, 'all'))}}}", file=sys.stderr)
        return 2
    names = list(PARTS) if argv[0] == "all" else [argv[0]]
    for name in names:
        start = time.monotonic()
        try:
            PARTS[name]()
        except DistError as exc:
            print(f"dist {name}: {exc}", file=sys.stderr)
            return 1
        print(f"dist {name}: {time.monotonic() - start:.1f}s")
    for path in sorted(DIST.iterdir()):
        if path.name.endswith(".partial"):
            continue
        print(f"  {path.relative_to(ROOT)}  {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
