"""Builders of action Jobs and their extravars ConfigMaps (pure: a request in, dicts out).

The actuator calls `build_extravars_configmap` and `build_action_job` for a `StartJob` effect
and sends both through `lightsout.k8s`; `job_name`/`job_labels` are also used to find a Job
again (re-adoption after a restart, deletion). The contract for names, labels, mount paths and
environment is docs/architecture.md ("Actions as Jobs").

Safety properties kept here, and asserted by tests/unit/test_jobs.py: credentials reach the pod
only as a read-only Secret volume (never env, args or the ConfigMap); the pod runs as a
non-root user with no service account token, a read-only root filesystem, no capabilities and
the RuntimeDefault seccomp profile; the Job is owned by its Node resource, bounded by a deadline
and garbage-collected after a TTL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightsout import API_GROUP, API_VERSION
from lightsout.actuation.inputs import ACTION_LABEL, ATTEMPT_LABEL, GENERATION_LABEL
from lightsout.config import OperatorConfig
from lightsout.execution.naming import dns_label, label_value
from lightsout.planning.types import Action

MANAGED_BY = "lightsout"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_NODE = "lightsout.dev/node"
ANNOTATION_INTENT = "lightsout.dev/intent"
ANNOTATION_NODE_NAME = "lightsout.dev/node-name"

CONTAINER_NAME = "action"
RUNNER_COMMAND = ("python", "-m", "lightsout.runner")
#: The "nonroot" user of distroless-style images; any non-zero uid works.
RUN_AS_USER = 65532
EXTRAVARS_KEY = "extravars.json"
EXTRAVARS_PATH = "/etc/lightsout/extravars.json"
CREDENTIALS_DIR = "/etc/lightsout/credentials"
CA_DIR = "/etc/lightsout/ca"
JOIN_DIR = "/etc/lightsout/join"
OVERLAY_DIR = "/etc/lightsout/overlay"
WORK_DIR = "/tmp/lightsout"  # noqa: S108 - a private emptyDir, not a shared /tmp
RESULT_PATH = "/dev/termination-log"
#: Every runner pod's environment after what names its action. The root filesystem is
#: read-only: the runner keeps Ansible's home and temp files in WORK_DIR, on the /tmp emptyDir
#: (`locked_down_pod`), and Python writes no bytecode.
RUNNER_ENV: Mapping[str, str] = {
    "LIGHTSOUT_RESULT_PATH": RESULT_PATH,
    "LIGHTSOUT_WORK_DIR": WORK_DIR,
    "PYTHONDONTWRITEBYTECODE": "1",
}

DEFAULT_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}

#: Extravars keys that name a credential *value*. Keys naming where a value lives
#: (`password_key`, `*_secret_name`, `*_dir`) are fine; these are refused outright.
_CREDENTIAL_KEY_SUFFIXES = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "privatekey",
)


@dataclass(frozen=True, kw_only=True)
class PodSettings:
    """Where and how a Lights-Out runner pod runs: the same for action and health-check Jobs."""

    image_pull_policy: str = "IfNotPresent"
    resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_RESOURCES.items()}
    )
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    #: Wake-on-LAN broadcasts only reach the machine's L2 segment from the host network.
    host_network: bool = False
    service_account_name: str | None = None


def configured_pod(config: OperatorConfig, *, magic_packets: bool) -> PodSettings:
    """The operator's `LIGHTSOUT_JOB_*` settings of a runner pod; one that sends a magic packet
    (a broadcast on the machine's own network) runs on the host network."""
    return PodSettings(
        node_selector=dict(config.job_node_selector),
        tolerations=tuple({"key": key, "operator": "Exists"} for key in config.job_tolerations),
        service_account_name=config.job_service_account,
        host_network=config.job_host_network or magic_packets,
    )


@dataclass(frozen=True)
class JobRequest(PodSettings):
    """Everything needed to build one action Job for one attempt of one intent."""

    node_name: str
    namespace: str
    node_uid: str
    generation: int
    attempt: int
    action: Action
    image: str
    extravars: Mapping[str, Any] = field(default_factory=dict)
    #: Secret mounted read-only at /etc/lightsout/credentials (BMC/Proxmox login, SSH key).
    credentials_secret: str | None = None
    #: Secret with a CA bundle, mounted read-only at /etc/lightsout/ca.
    ca_secret: str | None = None
    #: Join credentials of an Ephemeral clone (execution/join.py), mounted at /etc/lightsout/join.
    join_secret: str | None = None
    #: More files for that directory from the user's objects (projected volume sources): the
    #: k3s token (`k3s-token`) or the user-data template (`user-data.j2`), per join flavor.
    join_sources: tuple[Mapping[str, Any], ...] = ()
    #: ConfigMap of user playbooks mounted at /etc/lightsout/overlay.
    overlay_configmap: str | None = None
    #: Playbook file name overriding the shipped `<action>.yml`.
    playbook: str | None = None
    deadline_seconds: int = 900
    #: Pod failures that never ran the playbook (rejected at admission, evicted before start)
    #: may be retried inside the Job; every other failure fails the Job at once through the
    #: pod failure policy, because the operator owns retries (as new, named attempts).
    backoff_limit: int = 1
    ttl_seconds: int = 86_400

    def __post_init__(self) -> None:
        if self.generation < 0 or self.attempt < 1:
            raise ValueError("generation must be >= 0 and attempt >= 1")
        if not 0 <= self.backoff_limit <= 3:
            raise ValueError("backoff_limit must be 0..3: the operator owns retries")
        if self.deadline_seconds < 1 or self.ttl_seconds < 0:
            raise ValueError("deadline_seconds must be positive and ttl_seconds not negative")


def job_name(node_name: str, action: str, generation: int, attempt: int) -> str:
    """`lo-<node>-<action>-g<generation>-a<attempt>`, a DNS-1123 label of at most 63 chars.

    Too long or not label-safe (dots, capitals) → the node part is cut and a stable hash of the
    full name is added, so the name stays deterministic and distinct.
    """
    return dns_label("lo-", node_name, f"-{action}-g{generation}-a{attempt}")


def extravars_configmap_name(req: JobRequest) -> str:
    return f"{job_name(req.node_name, req.action, req.generation, req.attempt)}-extravars"


def job_labels(node_name: str, action: str, generation: int, attempt: int) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "action",
        LABEL_NODE: label_value(node_name),
        # What `inputs.job_identity` reads back.
        ACTION_LABEL: str(action),
        GENERATION_LABEL: str(generation),
        ATTEMPT_LABEL: str(attempt),
    }


def job_selector(node_name: str) -> str:
    """Label selector for all action Jobs of one machine."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NODE}={label_value(node_name)}"


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """The controller owner reference of an object Lights-Out makes (garbage-collected with
    its owner, which cannot be deleted in the foreground before it)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def node_owner_reference(req: JobRequest) -> dict[str, Any]:
    return owner_reference(f"{API_GROUP}/{API_VERSION}", "Node", req.node_name, req.node_uid)


def build_extravars_configmap(req: JobRequest, *, job_uid: str | None = None) -> dict[str, Any]:
    """The ConfigMap holding the action's extravars as JSON (never a credential).

    Owned by the Node resource, or by the Job when `job_uid` is given (then it disappears with
    the Job at its TTL instead of accumulating one ConfigMap per attempt).
    """
    refuse_credentials(req.extravars, "extravars")
    labels = job_labels(req.node_name, req.action, req.generation, req.attempt)
    if job_uid is None:
        owner = node_owner_reference(req)
    else:
        name = job_name(req.node_name, req.action, req.generation, req.attempt)
        owner = owner_reference("batch/v1", "Job", name, job_uid)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": extravars_configmap_name(req),
            "namespace": req.namespace,
            "labels": labels,
            "annotations": {ANNOTATION_NODE_NAME: req.node_name},
            "ownerReferences": [owner],
        },
        "data": {EXTRAVARS_KEY: json.dumps(req.extravars, sort_keys=True, indent=2)},
    }


def build_action_job(req: JobRequest) -> dict[str, Any]:
    """The `batch/v1` Job running one attempt of one action for one machine."""
    name = job_name(req.node_name, req.action, req.generation, req.attempt)
    labels = job_labels(req.node_name, req.action, req.generation, req.attempt)
    target = req.action.target
    intent = {
        "action": str(req.action),
        "desiredPowerState": str(target) if target is not None else None,
        "generation": req.generation,
        "attempt": req.attempt,
    }
    volumes, mounts = _volumes(req)
    pod_spec = locked_down_pod(req.image, req, _env(req), volumes, mounts)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": req.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_INTENT: json.dumps(intent, sort_keys=True),
                ANNOTATION_NODE_NAME: req.node_name,
            },
            "ownerReferences": [node_owner_reference(req)],
        },
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": req.backoff_limit,
            "activeDeadlineSeconds": req.deadline_seconds,
            "ttlSecondsAfterFinished": req.ttl_seconds,
            # A replacement pod only after the old one is fully gone: two runner pods of one
            # Job must never be sending power commands at the same time.
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    # The playbook ran and failed (or was killed, e.g. OOM): report it now;
                    # a retry is the operator's decision, made visible as a new attempt.
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER_NAME,
                            "operator": "NotIn",
                            "values": [0],
                        },
                    },
                    # Evicted, preempted or its node lost: the power command may have been
                    # half-sent, so this is a failed attempt too, not a silent re-run.
                    {
                        "action": "FailJob",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def locked_down_pod(
    image: str,
    settings: PodSettings,
    env: list[dict[str, str]],
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The pod spec every runner pod gets: no API token, non-root, read-only root (a /tmp
    emptyDir before `volumes`), no capabilities, RuntimeDefault seccomp, the result through the
    termination message."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The playbook talks to BMCs and hypervisors, never to the Kubernetes API.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": list(RUNNER_COMMAND),
                "env": env,
                "resources": {k: dict(v) for k, v in settings.resources.items()},
                "securityContext": {
                    "runAsNonRoot": True,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "terminationMessagePath": RESULT_PATH,
                # File, not FallbackToLogsOnError: log lines are not redacted the way the
                # runner's result is, and must never land in the Node's status.
                "terminationMessagePolicy": "File",
                "volumeMounts": [
                    {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - the pod's own emptyDir
                    *mounts,
                ],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}, *volumes],
    }
    if settings.service_account_name:
        pod_spec["serviceAccountName"] = settings.service_account_name
    if settings.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    return pod_spec


def _env(req: JobRequest) -> list[dict[str, str]]:
    env = {
        "LIGHTSOUT_ACTION": str(req.action),
        "LIGHTSOUT_NODE": req.node_name,
        "LIGHTSOUT_ATTEMPT": str(req.attempt),
        "LIGHTSOUT_EXTRAVARS": EXTRAVARS_PATH,
        **RUNNER_ENV,
    }
    if req.credentials_secret:
        env["LIGHTSOUT_CREDENTIALS_DIR"] = CREDENTIALS_DIR
    if req.ca_secret:
        env["LIGHTSOUT_CA_DIR"] = CA_DIR
    if req.join_secret:
        env["LIGHTSOUT_JOIN_DIR"] = JOIN_DIR
    if req.overlay_configmap:
        env["LIGHTSOUT_OVERLAY_DIR"] = OVERLAY_DIR
    if req.playbook:
        env["LIGHTSOUT_PLAYBOOK"] = req.playbook
    return [{"name": key, "value": value} for key, value in env.items()]


def _volumes(req: JobRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "extravars",
            "configMap": {
                "name": extravars_configmap_name(req),
                "items": [{"key": EXTRAVARS_KEY, "path": EXTRAVARS_KEY}],
                "defaultMode": 0o444,
            },
        },
    ]
    mounts: list[dict[str, Any]] = [
        {
            "name": "extravars",
            "mountPath": EXTRAVARS_PATH,
            "subPath": EXTRAVARS_KEY,
            "readOnly": True,
        },
    ]

    def add(name: str, source: str, ref: dict[str, Any], path: str | None) -> None:
        volumes.append({"name": name, source: ref})
        if path is not None:
            mounts.append({"name": name, "mountPath": path, "readOnly": True})

    if req.credentials_secret:
        # 0440: owned by root, readable through fsGroup by the non-root runner and nobody
        # else. SSH refuses group-readable keys, so the runner copies a key to /tmp as 0600.
        secret = {"secretName": req.credentials_secret, "defaultMode": 0o440}
        add("credentials", "secret", secret, CREDENTIALS_DIR)
    if req.ca_secret:
        add("ca", "secret", {"secretName": req.ca_secret, "defaultMode": 0o444}, CA_DIR)
    if req.join_secret and req.join_sources:
        sources = [{"secret": {"name": req.join_secret}}, *req.join_sources]
        add("join", "projected", {"sources": sources, "defaultMode": 0o440}, JOIN_DIR)
    elif req.join_secret:
        add("join", "secret", {"secretName": req.join_secret, "defaultMode": 0o440}, JOIN_DIR)
    if req.overlay_configmap:
        overlay = {"name": req.overlay_configmap, "defaultMode": 0o444}
        add("overlay", "configMap", overlay, OVERLAY_DIR)
    return volumes, mounts


def refuse_credentials(value: Any, path: str) -> None:
    """Raise if extravars carry a key that can only hold a credential value."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            normalized = "".join(ch for ch in str(key).lower() if ch.isalnum())
            if normalized.endswith(_CREDENTIAL_KEY_SUFFIXES):
                raise ValueError(
                    f"{path}.{key} looks like a credential; credentials are mounted from the "
                    "Secret, extravars may only name where they are"
                )
            refuse_credentials(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            refuse_credentials(item, f"{path}[{index}]")
