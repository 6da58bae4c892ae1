# syntax=docker/dockerfile:1
# The multikueue-dispatcher manager image (docs/deployment.md).
#
#   docker build -t multikueue-dispatcher:0.1.0 .
#
# Two stages: the build stage installs the product alone (the test world -- fake API server,
# Kueue emulation, demo -- is the separate distribution in sandbox/, never copied here) into a
# virtual environment; the final stage copies only that environment onto a slim Python base and runs as a non-root user.
# Nothing is written to the image's filesystem at run time except /tmp (an emptyDir in the
# Deployment), so the root filesystem can be read-only. Plugins: see "Plugins in the image" in
# docs/deployment.md (a derived image that pip-installs them into /opt/venv).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dispatcher ./dispatcher
RUN /opt/venv/bin/pip install --upgrade pip \
    && /opt/venv/bin/pip install . \
    && /opt/venv/bin/multikueue-dispatcher plugins

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="multikueue-dispatcher" \
      org.opencontainers.image.description="External dispatcher for Kueue MultiKueue" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DISPATCHER_CONFIG_FILE=/etc/multikueue-dispatcher/config.yaml
COPY --from=build /opt/venv /opt/venv
# The distroless convention: UID/GID 65532, no shell login, no home directory writes.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
# Exec form: the Python process is PID 1 and receives SIGTERM itself (its signal handler
# releases the Lease and exits within the grace period).
ENTRYPOINT ["multikueue-dispatcher"]
CMD ["run"]
