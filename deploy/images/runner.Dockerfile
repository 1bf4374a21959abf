# syntax=docker/dockerfile:1
# The image of every Lights-Out action Job: `python -m lightsout.runner` drives ansible-runner
# on the shipped playbooks/roles (or a ConfigMap overlay). Build from the repository root:
#   docker build -f deploy/images/runner.Dockerfile -t ghcr.io/lightsout/runner:0.1.0 .
# Without Docker, `make images` builds this same file with buildah on a Debian root filesystem
# made by mmdebstrap (tools/images/build.sh passes it as BASE).
# The Job runs it with a read-only root filesystem: mount an emptyDir at /tmp (the scratch
# dir, LIGHTSOUT_WORK_DIR) and the Secret at /etc/lightsout/credentials.
ARG BASE=debian:trixie-slim

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The [ansible] extra brings the full `ansible` package (community.general: redfish_*,
# ipmi_*, wakeonlan; community.proxmox: proxmox_kvm — collections come from PyPI, not Galaxy),
# proxmoxer (proxmox_vm), pyghmi (ipmi_power) and requests. Of its ~440 MB of collections only
# the two the roles use are kept. The build fails here if a module is missing, rather than the
# first action Job of that driver.
# The optional build secret `cacert` is a CA bundle for a TLS-intercepting proxy in front of
# PyPI (`--secret id=cacert,src=…`); it is used by pip here and is not in the image.
RUN --mount=type=secret,id=cacert \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-compile "$(ls /wheels/*.whl)[ansible]" \
 && cd /opt/venv/lib/python3*/site-packages/ansible_collections \
 && find . -mindepth 1 -maxdepth 1 -type d ! -name community -exec rm -rf {} + \
 && find community -mindepth 1 -maxdepth 1 -type d ! -name general ! -name proxmox \
      -exec rm -rf {} + \
 && /opt/venv/bin/pip uninstall -y pip \
 && /opt/venv/bin/python -m compileall -q -j 0 /opt/venv/lib \
 && /opt/venv/bin/python -c "import pyghmi.ipmi.command, proxmoxer, requests, ansible_runner" \
 && /opt/venv/bin/ansible-doc -t module community.proxmox.proxmox_kvm community.general.ipmi_power \
      community.general.wakeonlan community.general.redfish_command >/dev/null

FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
# openssh-client: the wol driver shuts machines down over SSH (roles/ssh_shutdown runs `ssh`);
# ipmitool for IPMI debugging from an action pod. The user is the uid the action Job runs as
# (execution/jobs.py RUN_AS_USER): ssh refuses to run for a uid that has no passwd entry
# ("No user exists for uid …"). The venv's python is a link to this base's python3.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 openssh-client ipmitool ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
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
