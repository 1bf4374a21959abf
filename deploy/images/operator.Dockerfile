# syntax=docker/dockerfile:1
# The Lights-Out operator (kopf). Build from the repository root:
#   docker build -f deploy/images/operator.Dockerfile -t ghcr.io/lightsout/operator:0.1.0 .
# Hardware actions do not run here: they run as Jobs of the runner image.

FROM python:3.12-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --upgrade pip \
 && /opt/venv/bin/pip install .

FROM python:3.12-slim
RUN groupadd --system --gid 10001 lightsout \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin lightsout
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["lightsout"]
CMD ["run"]
