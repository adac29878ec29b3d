# syntax=docker/dockerfile:1
# topo-scheduler image: `topo-scheduler run` (scheduler Deployment) and `topo-scheduler agent`
# (GPU topology DaemonSet) from one image.
#
#   docker build -t topo-scheduler:0.1.0 .
#
# Runs as the fixed non-root UID/GID 65532 and writes nothing at runtime, so it works with
# readOnlyRootFilesystem (the chart mounts an emptyDir on /tmp).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: wheels of the project and of every dependency ----------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# What `pip install .` reads: the project metadata, the readme it names, the packages.
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
COPY plugins ./plugins
RUN pip wheel --wheel-dir /wheels .

# ---- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
RUN groupadd --system --gid 65532 topo \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin topo
# Install from the wheels only (no index), bytecode compiled now so nothing is written later.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels --compile topo-scheduler \
 && topo-scheduler --help >/dev/null
USER 65532:65532
WORKDIR /tmp
# 10259: /healthz, /readyz and /metrics of `topo-scheduler run`.
EXPOSE 10259
ENTRYPOINT ["topo-scheduler"]
CMD ["--help"]
