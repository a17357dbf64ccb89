"""Build the sidecar's container image from the repository's Dockerfile with buildah and write
it as a Docker archive (``docker load`` / ``podman load`` read it).

    python tools/image.py --tag localhost/agent-watchdog-sidecar:0.2.0 \\
        --archive dist/agent-watchdog-sidecar-0.2.0-image.tar

``make dist`` runs this (through tools/dist.py); tests/test_image.py runs the archive it wrote.

The base of the Dockerfile's stages (``PYTHON_IMAGE``): with ``PYTHON_IMAGE`` set in the
environment, buildah pulls that image. Without it, no registry is needed: the base is made
locally — ``debootstrap`` of Debian bookworm with python3, pip and venv, imported into buildah's
storage. Its rootfs tarball is cached in ``.cache/image/`` (``WATCHDOG_IMAGE_CACHE``), and
buildah caches the build's layers (``--layers``, in its storage): a new sidecar wheel with the
same dependencies makes only the image's last layer again, and the dependencies' wheels and
venv are made again only when the wheel's list of dependencies changes. A machine without that
storage builds everything.

The local base trusts the CA certificates the host added to its own trust store
(/usr/local/share/ca-certificates): the dependencies stage's ``pip wheel`` reaches PyPI the way the
host does, through the same proxy, as a company's base image would.

Needs root and the Debian packages ``make system-deps`` installs (buildah, debootstrap).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("WATCHDOG_IMAGE_CACHE", ROOT / ".cache" / "image"))
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3",
                 "ca-certificates")
# The tag names the suite and the packages: change either and the base is made anew.
BASE_KEY = f"{SUITE}-" + "-".join(sorted(BASE_PACKAGES)).replace("python", "py")
BASE_TARBALL = CACHE / f"{BASE_KEY}.tar.gz"
BASE_IMAGE = ("localhost/agent-watchdog-base:"
              + hashlib.sha256(BASE_KEY.encode()).hexdigest()[:12])
BUILD_SECONDS = 900  # cold: debootstrap (~1-2 min) + pip wheel of every dependency
STEP_SECONDS = 300   # importing the base, committing it, writing the archive


class ImageError(Exception):
    """A step of the build failed; the message says which and why."""


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        raise ImageError(f"{name} is not installed: `make system-deps` installs it")
    return found


def run(*args: str, timeout: float = STEP_SECONDS,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run([tool(args[0]), *args[1:]], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{' '.join(args)} took longer than {timeout:.0f}s") from exc
    if check and done.returncode != 0:
        raise ImageError(f"{' '.join(args)} exited {done.returncode}:\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


# -- the local base image -------------------------------------------------------------------

def make_base_tarball() -> None:
    """debootstrap Debian with python3 into a rootfs, trusting the host's added CAs."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        rootfs = Path(work) / "rootfs"
        run("debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
            SUITE, str(rootfs), timeout=BUILD_SECONDS)
        for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
            shutil.copy(cert, rootfs / "usr/local/share/ca-certificates" / cert.name)
        run("chroot", str(rootfs), "update-ca-certificates", "--fresh")
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        partial = BASE_TARBALL.with_suffix(".partial")
        with tarfile.open(partial, "w:gz", compresslevel=1) as archive:
            archive.add(rootfs, arcname=".")
        partial.rename(BASE_TARBALL)


def import_base() -> None:
    if not BASE_TARBALL.exists():
        make_base_tarball()
    container = run("buildah", "from", "scratch").stdout.strip()
    try:
        run("buildah", "add", container, str(BASE_TARBALL), "/")
        run("buildah", "config", "--env",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--cmd", "python3", container)
        run("buildah", "commit", "--quiet", container, BASE_IMAGE)
    finally:
        run("buildah", "rm", container, check=False)


def local_base() -> str:
    if run("buildah", "images", "--quiet", BASE_IMAGE, check=False).returncode != 0:
        import_base()
    return BASE_IMAGE


# -- the image ------------------------------------------------------------------------------

def build(tag: str, version: str, base: str) -> None:
    # Docker format: the OCI format would drop the Dockerfile's HEALTHCHECK.
    run("buildah", "bud", "--isolation", "chroot", "--layers", "--format", "docker",
        "--build-arg", f"PYTHON_IMAGE={base}", "--build-arg", f"VERSION={version}",
        "--tag", tag, str(ROOT), timeout=BUILD_SECONDS)


def write_archive(tag: str, archive: Path) -> None:
    """The image as a Docker archive that names it ``NAME:TAG`` (without localhost/)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    reference = tag.removeprefix("localhost/")
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    run("buildah", "push", "--quiet", tag, f"docker-archive:{partial}:{reference}")
    partial.rename(archive)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", required=True, help="the image's name in local storage")
    parser.add_argument("--version", required=True,
                        help="the image's org.opencontainers.image.version label")
    parser.add_argument("--archive", type=Path, help="write the image here (docker-archive)")
    args = parser.parse_args(argv)
    try:
        if os.geteuid() != 0:
            raise ImageError("building the image needs root (debootstrap and buildah)")
        start = time.monotonic()
        base = os.environ.get("PYTHON_IMAGE") or local_base()
        based = time.monotonic()
        build(args.tag, args.version, base)
        built = time.monotonic()
        if args.archive:
            write_archive(args.tag, args.archive)
    except ImageError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    print(f"image {args.tag}: base {based - start:.1f}s, build {built - based:.1f}s, "
          f"archive {time.monotonic() - built:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
