# syntax=docker/dockerfile:1
# Ibex Context: `docker build -t ibex-context:0.1.0 .` (docs/DEPLOYMENT.md).
#
# Stage 1 builds the project's wheel and installs it, with its dependencies, into a virtualenv.
# Stage 2 is a clean slim Python with only that virtualenv: no compiler, no pip, no sources.
# The process runs as uid 10001 and writes only to /var/lib/ibex-context (the embedded backend's
# data, a volume; unused with Redis + the memory service) and /tmp: a read-only root filesystem
# works when those two are mounted writable (the Kubernetes manifests mount emptyDirs there).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY domain/ domain/
COPY ports/ ports/
COPY adapters/ adapters/
COPY entrypoints/ entrypoints/
COPY contracts/ contracts/
COPY conformance/ conformance/
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/ibex-context \
    && /opt/ibex-context/bin/pip install /wheels/ibex_context-*.whl \
    && /opt/ibex-context/bin/pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="ibex-context" \
      org.opencontainers.image.description="Context assembly service for LLM calls (gRPC + HTTP)"
RUN groupadd --system --gid 10001 ibex \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin ibex \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/ibex-context
COPY --from=build /opt/ibex-context /opt/ibex-context
# Binds every interface (the kubelet probes the pod IP), so caller authentication is configured by
# default: signed principal proofs verified with the key file below (mount it from a Secret), and
# mTLS when IBEX_CONTEXT_TLS_* are set. Without the key file the service refuses to start.
ENV PATH=/opt/ibex-context/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    IBEX_CONTEXT_GRPC_ADDR=0.0.0.0:9092 \
    IBEX_CONTEXT_HTTP_ADDR=0.0.0.0:9093 \
    IBEX_CONTEXT_HEALTH_ADDR=0.0.0.0:9094 \
    IBEX_CONTEXT_PRINCIPAL_KEYS=/etc/ibex-context/principal/keys.json \
    IBEX_CONTEXT_DATA_PATH=/var/lib/ibex-context/ibex.db \
    IBEX_CONTEXT_DRAIN_DELAY=5s \
    IBEX_CONTEXT_SHUTDOWN_GRACE=10s
VOLUME ["/var/lib/ibex-context"]
WORKDIR /var/lib/ibex-context
USER 10001:10001
EXPOSE 9092 9093 9094
STOPSIGNAL SIGTERM
ENTRYPOINT ["ibex-context", "serve"]
