# syntax=docker/dockerfile:1
# The image of every Lights-Out action Job: `python -m lightsout.runner` drives ansible-runner
# on the shipped playbooks/roles (or a ConfigMap overlay). Build from the repository root:
#   docker build -f deploy/images/runner.Dockerfile -t ghcr.io/lightsout/runner:0.1.0 .
# The Job runs it with a read-only root filesystem: mount an emptyDir at /tmp (the scratch
# dir, LIGHTSOUT_WORK_DIR) and the Secret at /etc/lightsout/credentials.

FROM python:3.12-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The [ansible] extra brings the full `ansible` package (community.general, community.proxmox
# ... — collections come from PyPI, not Galaxy), proxmoxer, pyghmi and requests.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --upgrade pip \
 && /opt/venv/bin/pip install ".[ansible]"

FROM python:3.12-slim
# ssh: the wol driver shuts machines down over SSH.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 lightsout \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin lightsout
COPY --from=build /opt/venv /opt/venv
COPY --chown=root:root playbooks /opt/lightsout/playbooks
COPY --chown=root:root roles /opt/lightsout/roles
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LIGHTSOUT_PLAYBOOK_DIR=/opt/lightsout/playbooks \
    LIGHTSOUT_ROLES_DIR=/opt/lightsout/roles \
    LIGHTSOUT_WORK_DIR=/tmp
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["python", "-m", "lightsout.runner"]
