# syntax=docker/dockerfile:1
#
# agent-watchdog-sidecar: a small image that runs `watchdog serve`, configured by WATCHDOG_* env vars.
#
#   make dist-python    # the sidecar's wheel into dist/ (the image installs that one)
#   docker build -t agent-watchdog-sidecar:0.2.0 .
#   docker run --rm --read-only --tmpfs /tmp -v watchdog-state:/var/lib/watchdog \
#     -p 127.0.0.1:9464:9464 agent-watchdog-sidecar:0.2.0
#
# - sidecar: takes the sidecar's wheel `make dist` built (dist/: it carries the compiled OTLP
#   decode, built where the Rust toolchain is), pins it by its hash, and reads from its metadata
#   the list of what it depends on;
# - dependencies: makes a wheel of every dependency from that list alone, and pins each by its
#   hash (this stage and the final stage's dependency layer are built again only when the list
#   changes: a new sidecar wheel with the same dependencies reuses them);
# - final: installs the dependencies' wheels offline into a venv (/opt/watchdog) in one layer,
#   then the sidecar's wheel (--no-deps) in a small last layer; the venv is owned by root and
#   read-only for the process, which runs as uid/gid 65532 (the "nonroot" id of distroless).
#
# Read-only root filesystem: the process writes only to WATCHDOG_STATE_DIR (mount a volume
# there; Kubernetes: an emptyDir) and SQLite's temporary files go to /tmp (mount an emptyDir or
# a tmpfs). Python writes no bytecode (PYTHONDONTWRITEBYTECODE; the venv is compiled at build)
# and pip keeps no cache.
#
# Binds: OTLP and the control API listen on 127.0.0.1 by default (a sidecar shares the agent
# pod's network namespace). To reach them from outside the container set
# WATCHDOG_OTLP_GRPC_ADDRESS / WATCHDOG_OTLP_HTTP_ADDRESS / WATCHDOG_API_ADDRESS to 0.0.0.0:PORT
# and WATCHDOG_API_TOKEN: the process refuses a non-loopback bind without a token.

# The base of every stage. `make dist` (tools/image.py) builds with a Debian bookworm + python3
# base it makes itself when no registry is reachable; any image with python3.11+, pip and venv
# works. It writes the image to dist/agent-watchdog-sidecar-VERSION-image.tar (`docker load -i`).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS sidecar
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# The sidecar's wheel as `make dist` built it: the package, its default rule pack, and the
# compiled decode (Rust, built by setuptools-rust where cargo is: not in this stage).
# /sidecar.txt: the wheel by its hash; /dependencies.in: its Requires-Dist without the extras.
COPY dist/agent_watchdog_sidecar-*.whl /dist/
RUN python -c "import email, glob, hashlib, sys, zipfile; \
wheels = glob.glob('/dist/agent_watchdog_sidecar-*.whl'); \
len(wheels) == 1 or sys.exit(f'dist/ holds {len(wheels)} sidecar wheels, not one: {wheels}'); \
[wheel] = wheels; \
archive = zipfile.ZipFile(wheel); \
[metadata] = [n for n in archive.namelist() if n.endswith('.dist-info/METADATA')]; \
requires = email.message_from_bytes(archive.read(metadata)).get_all('Requires-Dist', []); \
open('/dependencies.in', 'w').writelines(r + '\n' for r in requires if 'extra ==' not in r); \
digest = hashlib.sha256(open(wheel, 'rb').read()).hexdigest(); \
open('/sidecar.txt', 'w').write(wheel + ' --hash=sha256:' + digest + '\n')"

FROM ${PYTHON_IMAGE} AS dependencies
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A builder caches a COPY by the content it copies: the same list, the same wheels below.
COPY --from=sidecar /dependencies.in /dependencies.in
# /dependencies.txt: every wheel as NAME==VERSION with its hash, what the final stage installs.
RUN python -m pip wheel --wheel-dir /wheels -r /dependencies.in \
    && python -c "import glob, hashlib, os; \
wheels = sorted(glob.glob('/wheels/*.whl')); \
pins = ['{0}=={1}'.format(*os.path.basename(w).split('-')[:2]) for w in wheels]; \
digests = [hashlib.sha256(open(w, 'rb').read()).hexdigest() for w in wheels]; \
open('/dependencies.txt', 'w').writelines(p + ' --hash=sha256:' + d + '\n' for p, d in zip(pins, digests))"

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WATCHDOG_STATE_DIR=/var/lib/watchdog
# What each install below installs, by hash, copied first: new wheels are a new layer (a builder
# caches a RUN by its text and the layers before it, not by what it mounts). The wheels are
# bind-mounted from their stage, so no layer keeps them; --no-index and --require-hashes:
# nothing is downloaded here, and pip installs exactly the pinned wheels.
COPY --from=dependencies /dependencies.txt /opt/watchdog.dependencies.txt
RUN --mount=type=bind,from=dependencies,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/watchdog \
    && python -m pip --python /opt/watchdog/bin/python install --no-index --require-hashes \
       --find-links=/wheels -r /opt/watchdog.dependencies.txt \
    && mkdir -p /var/lib/watchdog \
    && chown 65532:65532 /var/lib/watchdog \
    && chmod 0750 /var/lib/watchdog
# The image's metadata before the sidecar's layer, so that a new wheel rebuilds only that layer.
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="agent-watchdog-sidecar" \
      org.opencontainers.image.description="Watches LLM agents through their OpenTelemetry spans; tells stuck, looping or over-budget runs to wrap up or stop." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# OTLP/gRPC, OTLP/HTTP, metrics + health, control API (DESIGN §2), and the model endpoint
# (DESIGN §12: off unless WATCHDOG_MODEL_ADDRESS is set, e.g. 0.0.0.0:9478).
EXPOSE 4317 4318 9464 9477 9478
# Kubernetes uses the chart's probes; this is for `docker run` and compose. It asks /healthz
# where the metrics listener is, WATCHDOG_METRICS_ADDRESS (default 0.0.0.0:9464; a wildcard
# host is asked on loopback), with the image's own python (tests/test_dockerfile.py runs it).
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; host, _, port = os.environ.get('WATCHDOG_METRICS_ADDRESS', '').strip().rpartition(':'); host = host.strip('[]'); host = {'': '127.0.0.1', '0.0.0.0': '127.0.0.1', '::': '::1'}.get(host, host); host = f'[{host}]' if ':' in host else host; urllib.request.urlopen(f'http://{host}:{port or 9464}/healthz', timeout=2)"]
ENTRYPOINT ["watchdog"]
CMD ["serve"]
WORKDIR /var/lib/watchdog
# The sidecar alone, --no-deps: its dependencies are the layer above, resolved from its own
# metadata (tests/test_image.py checks the image's venv satisfies every requirement).
COPY --from=sidecar /sidecar.txt /opt/watchdog.sidecar.txt
RUN --mount=type=bind,from=sidecar,source=/dist,target=/dist \
    python -m pip --python /opt/watchdog/bin/python install --no-index --require-hashes \
       --no-deps -r /opt/watchdog.sidecar.txt
# Only now: before the installs, `python` would resolve to the venv, which has no pip.
ENV PATH=/opt/watchdog/bin:$PATH
USER 65532:65532
