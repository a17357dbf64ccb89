"""The Java agents of the model endpoint's tests (``java/``, a Maven project): where ``make
java-agent`` (part of ``make test``) built them, and one run of one."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.frameworks.harness import DRIVER_TIMEOUT, ROOT

JAVA_DIR = Path(__file__).resolve().parent / "java"
# a JVM that starts cheap: the client compiler only (an agent's run is a few seconds), the
# JDK's class-data archive where it has one
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")


def build_dir() -> Path:
    """``.cache/java-agent/HASH/`` (agent.jar and lib/), HASH that of ``java/``'s pom.xml and
    sources, as the Makefile hashes them (pom.xml, then the sources in byte order)."""
    sources = [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"),
                                             key=lambda path: str(path.relative_to(ROOT)))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    return ROOT / ".cache" / "java-agent" / digest


def built() -> Path:
    """The build of the sources as they are now; an AssertionError saying how to make it."""
    built = build_dir()
    if not (built / "agent.jar").is_file() or not (built / "lib").is_dir():
        raise AssertionError(f"{built}/agent.jar is missing (the Java agents of "
                             f"tests/frameworks/java as they are now): run `make java-agent` "
                             f"(part of `make test`; it needs a JDK 17 and Maven)")
    return built


def run(driver: str, mode: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``java agent.Main DRIVER MODE`` once, to its exit (an AssertionError if it fails)."""
    jars = built()
    result = subprocess.run(["java", *JVM_FLAGS, "-cp", f"{jars / 'agent.jar'}:{jars / 'lib'}/*",
                             "agent.Main", driver, mode],
                            env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            cwd=JAVA_DIR)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"java agent.Main {driver} {mode} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result
