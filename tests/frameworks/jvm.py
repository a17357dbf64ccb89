"""The JVM agents of the tests, each a Maven project: the model endpoint's (``java/``, built by
``make java-agent``), the Spring AI agent (``spring_ai/``, ``make spring-ai-agent``) and the Koog
agent (``koog/``, Kotlin, ``make koog-agent``), all part of ``make test``: where they were built,
and one run of one."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.frameworks.harness import DRIVER_TIMEOUT, ROOT

JAVA_DIR = Path(__file__).resolve().parent / "java"
SPRING_AI_DIR = Path(__file__).resolve().parent / "spring_ai"
KOOG_DIR = Path(__file__).resolve().parent / "koog"
# each project's make target, and where it builds (.cache/NAME/HASH/)
TARGETS = {JAVA_DIR: "java-agent", SPRING_AI_DIR: "spring-ai-agent", KOOG_DIR: "koog-agent"}


def jvm_flags() -> list[str]:
    """The Makefile's ``JAVA_AGENT_JVM``, the flags the class-data archive was made with: a JVM
    that starts cheap (the client compiler only: a run is a few seconds; the serial GC), its
    log on stderr only (stdout is the agent's)."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines()
                if line.startswith("JAVA_AGENT_JVM"))
    return line.partition(":=")[2].split()


def build_dir(project: Path = JAVA_DIR) -> Path:
    """``.cache/<target>/HASH/`` (agent.jar, lib/, classpath; ``java/``'s also agent.jsa), HASH
    that of the project's pom.xml and sources (Java or Kotlin), as the Makefile hashes them
    (pom.xml, then the sources in byte order)."""
    sources = [project / "pom.xml",
               *sorted((path for path in (project / "src").rglob("*")
                        if path.suffix in (".java", ".kt")),
                       key=lambda path: str(path.relative_to(ROOT)))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    return ROOT / ".cache" / TARGETS[project] / digest


def built(project: Path = JAVA_DIR) -> Path:
    """The build of the project's sources as they are now; an AssertionError saying how to make
    it."""
    built = build_dir(project)
    if not (built / "classpath").is_file():
        raise AssertionError(f"{built}/classpath is missing (the Java agents of "
                             f"{project.relative_to(ROOT)} as they are now): run `make "
                             f"{TARGETS[project]}` (part of `make test`; it needs a JDK 17 and "
                             f"Maven)")
    return built


def run(driver: str, mode: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``java agent.Main DRIVER MODE`` once, to its exit (an AssertionError if it fails), from
    the build's class-data archive."""
    jars = built()
    classpath = (jars / "classpath").read_text().strip()
    result = subprocess.run(["java", *jvm_flags(), f"-XX:SharedArchiveFile={jars / 'agent.jsa'}",
                             "-cp", classpath, "agent.Main", driver, mode],
                            env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            cwd=JAVA_DIR)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"java agent.Main {driver} {mode} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def run_spring_ai(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``java agent.Main ARGS...`` of ``spring_ai/`` once, to its exit (an AssertionError if it
    fails)."""
    return run_main(SPRING_AI_DIR, "agent.Main", args, env)


def run_koog(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``java agent.MainKt ARGS...`` of ``koog/`` once, to its exit (an AssertionError if it
    fails)."""
    return run_main(KOOG_DIR, "agent.MainKt", args, env)


def run_main(project: Path, main: str, args: list[str],
             env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``java MAIN ARGS...`` of the project's build once, to its exit (an AssertionError if it
    fails)."""
    classpath = (built(project) / "classpath").read_text().strip()
    result = subprocess.run(["java", *jvm_flags(), "-cp", classpath, main, *args],
                            env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            cwd=project)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"java {main} {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result
