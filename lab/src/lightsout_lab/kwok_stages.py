"""The lifecycle kwok gives the pods of the lab's stand-in machines (its pod Stages).

kwok (v0.7) plays a pod's whole life from Stages: each selects pods by their fields and says
what their status becomes next. Given none it uses its built-in "fast" set: a scheduled pod
is Running at once, a Job's pod Succeeded at once, a pod being deleted is gone. The lab gives
the same three, written here, with one difference a test needs: a Job's pod carrying
`HOLD_ANNOTATION` stays Running until the annotation is removed, as a batch Job still at
work would (tests/e2e/test_autoscale_scale_down.py holds one on a machine scale-down would
otherwise power off). kwok uses its built-ins only when no pod Stage is configured, so all
three are written out. Called by `lightsout_lab.cluster` when it writes kwok's configuration.
"""

from __future__ import annotations

import json
from typing import Any

#: On a Job's pod (any value): kwok keeps it Running until the annotation is removed.
HOLD_ANNOTATION = "lab.lightsout.dev/hold-running"

#: A pod bound to a machine: Ready, its containers running, init containers done.
_RUNNING = """\
{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
conditions:
{{ range list "Initialized" "Ready" "ContainersReady" }}
- type: {{ . | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
{{ range .spec.readinessGates }}
- type: {{ .conditionType | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  restartCount: 0
  {{ if eq .restartPolicy "Always" }}
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
  {{ else }}
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
  {{ end }}
{{ end }}
"""

#: A Job's pod done: every container exited 0.
_SUCCEEDED = """\
{{ $now := Now }}
phase: Succeeded
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
"""


def _stage(name: str, match: list[dict[str, Any]], then: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": match},
            "next": then,
        },
    }


def _absent(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "DoesNotExist"}


def pod_stages() -> list[dict[str, Any]]:
    """kwok's pod Stages for the lab: run, complete (unless held) and delete."""
    alive = _absent(".metadata.deletionTimestamp")
    return [
        _stage(
            "pod-ready",
            [alive, _absent(".status.podIP")],
            {"statusTemplate": _RUNNING},
        ),
        _stage(
            "pod-complete",
            [
                alive,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
                _absent(f'.metadata.annotations["{HOLD_ANNOTATION}"]'),
            ],
            {"statusTemplate": _SUCCEEDED},
        ),
        _stage(
            "pod-delete",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]


def configuration() -> str:
    """kwok's `--config` file: its options and the pod Stages, as YAML documents (JSON)."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {},
    }
    return "\n---\n".join(json.dumps(doc, indent=1) for doc in [options, *pod_stages()]) + "\n"
