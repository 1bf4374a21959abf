# syntax=docker/dockerfile:1
# The Lights-Out operator (kopf). Build from the repository root:
#   docker build -f deploy/images/operator.Dockerfile -t ghcr.io/lightsout/operator:0.1.0 .
# Without Docker, `make images` builds this same file with buildah on a Debian root filesystem
# made by mmdebstrap (tools/images/build.sh passes it as BASE).
# Hardware actions do not run here: they run as Jobs of the runner image.
ARG BASE=debian:trixie-slim

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The operator's wheel holds src/lightsout only (the lab is a distribution of its own).
# The optional build secret `cacert` is a CA bundle for a TLS-intercepting proxy in front of
# PyPI (`--secret id=cacert,src=…`); it is used by pip here and is not in the image.
RUN --mount=type=secret,id=cacert \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install /wheels/*.whl \
 && /opt/venv/bin/python -c "import kopf, kubernetes, lightsout.cli" \
 && /opt/venv/bin/pip uninstall -y pip

FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
# The venv's python is a link to this one: same base, same Python.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 lightsout \
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
