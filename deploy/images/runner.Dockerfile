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
# The [ansible] extra brings the full `ansible` package (community.general: redfish_*,
# ipmi_*, wakeonlan; community.proxmox: proxmox_kvm — collections come from PyPI, not Galaxy),
# proxmoxer (proxmox_vm), pyghmi (ipmi_power) and requests. The build fails here if one of
# them is missing, rather than the first action Job of that driver.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --upgrade pip \
 && /opt/venv/bin/pip install ".[ansible]" \
 && /opt/venv/bin/python -c "import pyghmi.ipmi.command, proxmoxer, requests, ansible_runner" \
 && /opt/venv/bin/ansible-doc -t module community.proxmox.proxmox_kvm community.general.ipmi_power \
      community.general.wakeonlan community.general.redfish_command >/dev/null

FROM python:3.12-slim
# openssh-client: the wol driver shuts machines down over SSH (roles/ssh_shutdown runs `ssh`).
# The user is the uid the action Job runs as (execution/jobs.py RUN_AS_USER): ssh refuses to
# run for a uid that has no passwd entry ("No user exists for uid …").
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 lightsout \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
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
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["python", "-m", "lightsout.runner"]
