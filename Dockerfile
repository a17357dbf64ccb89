# syntax=docker/dockerfile:1
#
# agent-watchdog-sidecar: a small image that runs `watchdog serve`, configured by WATCHDOG_* env vars.
#
#   make dist-python    # the sidecar's wheel into dist/ (the image installs that one)
#   docker build -t agent-watchdog-sidecar:0.2.0 .
#   docker run --rm --read-only --tmpfs /tmp -v watchdog-state:/var/lib/watchdog \
#     -p 127.0.0.1:9464:9464 agent-watchdog-sidecar:0.2.0
#
# - builder: takes the sidecar's wheel `make dist` built (dist/: it carries the compiled OTLP
#   decode, built where the Rust toolchain is) and makes a wheel of every dependency;
# - final: installs those wheels offline into a venv (/opt/watchdog) that is owned by root and
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

# The base of both stages. `make dist` (tools/image.py) builds with a Debian bookworm + python3
# base it makes itself when no registry is reachable; any image with python3.11+, pip and venv
# works. It writes the image to dist/agent-watchdog-sidecar-VERSION-image.tar (`docker load -i`).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The sidecar's wheel as `make dist` built it: the package, its default rule pack, and the
# compiled decode (Rust, built by setuptools-rust where cargo is: not in this stage).
COPY dist/agent_watchdog_sidecar-*.whl dist/
RUN python -m pip wheel --wheel-dir /wheels dist/agent_watchdog_sidecar-*.whl \
    && sha256sum /wheels/*.whl > /wheels.sha256

FROM ${PYTHON_IMAGE}
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="agent-watchdog-sidecar" \
      org.opencontainers.image.description="Watches LLM agents through their OpenTelemetry spans; tells stuck, looping or over-budget runs to wrap up or stop." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WATCHDOG_STATE_DIR=/var/lib/watchdog
# What the install below installs, by hash: new wheels are a new layer (a builder caches a RUN
# by its text and the layers before it, not by what it mounts).
COPY --from=builder /wheels.sha256 /opt/watchdog.wheels.sha256
# The wheels are bind-mounted from the builder, so no layer keeps them; --no-index: nothing is
# downloaded here, every dependency was resolved in the builder.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/watchdog \
    && python -m pip --python /opt/watchdog/bin/python install --no-index \
       --find-links=/wheels agent-watchdog-sidecar \
    && mkdir -p /var/lib/watchdog \
    && chown 65532:65532 /var/lib/watchdog \
    && chmod 0750 /var/lib/watchdog
# Only now: before the install, `python` would resolve to the venv, which has no pip.
ENV PATH=/opt/watchdog/bin:$PATH
WORKDIR /var/lib/watchdog
USER 65532:65532
# OTLP/gRPC, OTLP/HTTP, metrics + health, control API (DESIGN §2).
EXPOSE 4317 4318 9464 9477
# Kubernetes uses the chart's probes; this is for `docker run` and compose.
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]
ENTRYPOINT ["watchdog"]
CMD ["serve"]
