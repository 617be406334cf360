# mcp-edge container image.
#
#   docker build -t mcp-edge:local .
#   docker run --rm -p 8080:8080 \
#     -v "$PWD/config.yaml:/etc/mcp-edge/config.yaml:ro" \
#     -v "$PWD/keys:/etc/mcp-edge/keys:ro" \
#     mcp-edge:local
#
# Configuration (/etc/mcp-edge/config.yaml) and the state key ring (/etc/mcp-edge/keys/, or
# MCP_EDGE_STATE_KEYS) are supplied at run time; nothing secret is baked into the image.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build
# Resolves the locked dependencies and the gateway itself into /app/.venv. uv comes from PyPI.
FROM ${PYTHON_IMAGE} AS build

ARG UV_VERSION=0.13.8
RUN pip install --no-cache-dir "uv==${UV_VERSION}"

ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3 \
    UV_PROJECT_ENVIRONMENT=/app/.venv

WORKDIR /app

# Dependencies first: this layer is reused while only the gateway's code changes. The image runs
# `mcp-edge serve`, with every feature a configuration may name (the extras but the demo's SDK).
ARG EXTRAS="--extra serve --extra redis --extra tracing --extra cel --extra identity"
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev ${EXTRAS} --no-install-project --no-editable

# Then the gateway, installed as a regular (non-editable) package into the same venv.
COPY README.md ./
COPY mcp_edge ./mcp_edge
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev ${EXTRAS} --no-editable

# ---------------------------------------------------------------- runtime
# Same Python base, no uv, no compilers: only the venv (which holds the gateway) is copied in.
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="mcp-edge" \
      org.opencontainers.image.description="Stateless, horizontally scalable edge gateway for the Model Context Protocol" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 mcp-edge \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin mcp-edge

ENV PATH="/app/.venv/bin:${PATH}" \
    VIRTUAL_ENV=/app/.venv \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /app
# Owned by root and read-only for the service user.
COPY --from=build /app/.venv /app/.venv

USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM

# Liveness of the process only (no upstream check); no curl in the image, so Python does it.
# It runs with the container's environment: with local (stdio) servers running as this image's
# user and the keys in MCP_EDGE_STATE_KEYS, run with --no-healthcheck and probe /healthz from
# outside (docs/legacy-and-stdio.md). Kubernetes ignores it and probes over HTTP.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request as u; sys.exit(0 if u.urlopen(os.environ.get('MCP_EDGE_HEALTHCHECK_URL', 'http://127.0.0.1:8080/healthz'), timeout=4).status == 200 else 1)"]

ENTRYPOINT ["mcp-edge"]
CMD ["serve", "--config", "/etc/mcp-edge/config.yaml"]
