"""Reads what an action Job did, from the Job's status and its pods (pure: dicts in).

The Node reconciler calls `observe_job` on a machine's newest action Job and its pods to build
`Observations.job` for the state machine. The runner in the Job's pod writes ONE JSON object to
its termination message (docs/architecture.md):
`{"result": "Succeeded"|"Failed", "failedTask": str|null, "message": str, "values": {...}}`.
Anything else there (nothing, non-JSON, JSON cut at Kubernetes' 4096-byte limit, a wrong
shape) is tolerated and explained in the outcome's message, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lightsout.actuation.inputs import job_identity
from lightsout.execution.jobs import CONTAINER_NAME
from lightsout.planning.types import JobPhase, ObservedJob, ObservedPowerState, OperationResult
from lightsout.state.parse import as_int, as_mapping, dig, parse_power_state, parse_time
from lightsout.text import clip_middle

#: Kubernetes keeps at most this many bytes of a container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096
#: Longest message carried into status; the rest of a runaway message is dropped.
MESSAGE_LIMIT = 2048
_EXCERPT = 160
_STARTED_POD_PHASES = frozenset({"Running", "Succeeded", "Failed"})
#: How long the scheduler must have refused a Job's pod before the attempt counts as failed: a
#: burst of Jobs can wait a while for room on the nodes that run them, which is no mistake.
UNSCHEDULABLE_GRACE = timedelta(seconds=120)
#: Container waiting reasons of a pod that will not start until someone acts (the kubelet keeps
#: retrying, but the image is absent, its config names something missing, ...).
NEVER_STARTS = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "ErrImageNeverPull",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
    }
)
#: A kubelet's `FailedMount` event message for a volume whose Secret or ConfigMap does not exist
#: (`MountVolume.SetUp failed for volume "credentials" : secret "bmc" not found`), or lacks a
#: key the volume's `items` name (`references non-existent secret key: password`): either way
#: the pod waits in ContainerCreating until the Job's deadline unless the operator reads the
#: event. Other mount failures (a slow secret cache, a CSI hiccup) often pass by themselves and
#: are left to the deadline.
MISSING_VOLUME_SOURCE = re.compile(
    r'\b(secret|configmap) "[^"]+" not found|references non-existent (secret|config) key: ', re.I
)
MOUNT_FAILED = "FailedMount"


@dataclass(frozen=True)
class RunnerResult:
    """The runner's own verdict, as written to the termination message."""

    result: OperationResult
    failed_task: str | None = None
    message: str = ""
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobOutcome:
    """What a Job is doing or did, in the FSM's terms, with a message a person can act on."""

    state: JobPhase
    message: str
    failed_task: str | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    #: Reason of the Job's terminal condition (DeadlineExceeded, BackoffLimitExceeded,
    #: PodFailurePolicy, ...), if it has one.
    reason: str | None = None
    #: The runner's verdict, None when it left no readable result.
    runner_result: OperationResult | None = None

    @property
    def power_state(self) -> ObservedPowerState | None:
        """`values.power_state` as reported by the playbook (`On`/`Off`/`Unknown`)."""
        return parse_power_state(self.values.get("power_state", self.values.get("powerState")))


def parse_runner_result(text: str | None) -> tuple[RunnerResult | None, str]:
    """The runner's result from a termination message, or None and why it could not be read."""
    if text is None or not text.strip():
        return None, "the runner left no result"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        cut = len(text.encode()) >= TERMINATION_MESSAGE_LIMIT - 8
        hint = f", probably cut at {TERMINATION_MESSAGE_LIMIT} bytes" if cut else ""
        return None, f"the runner's result is not JSON ({exc.msg}{hint}): {_excerpt(text)}"
    if not isinstance(data, Mapping):
        return None, f"the runner's result is not a JSON object: {_excerpt(text)}"
    verdict = data.get("result")
    if verdict not in (OperationResult.SUCCEEDED, OperationResult.FAILED):
        return None, f"the runner's result has no valid 'result' (got {verdict!r})"
    failed_task = data.get("failedTask")
    message = data.get("message")
    values = data.get("values")
    return (
        RunnerResult(
            result=OperationResult(verdict),
            failed_task=failed_task if isinstance(failed_task, str) and failed_task else None,
            message=_clip(message if isinstance(message, str) else json.dumps(message or "")),
            values=dict(values) if isinstance(values, Mapping) else {},
        ),
        "",
    )


def parse_job_outcome(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
    events: Sequence[Mapping[str, Any]] = (),
) -> JobOutcome:
    """Combine the Job's conditions with its pods' runner results into one outcome.

    `events` are Warning events about the Job's pods (`FailedMount`): a real kubelet keeps a pod
    whose Secret or ConfigMap volume is missing in ContainerCreating and says why only there.

    Only the terminal conditions `Complete` and `Failed` end a Job: since Kubernetes 1.31 the
    controller first adds `SuccessCriteriaMet`/`FailureTarget` and waits for the pods to stop,
    and until then a power command may still be in flight. One exception, before the
    controller has said anything: a one-pod Job whose pod succeeded with its result and no
    other pod alive is complete (the controller lags after an API server outage).
    """
    status = as_mapping(job.get("status"))
    conditions = {
        str(c.get("type")): c
        for c in _sequence(status.get("conditions"))
        if isinstance(c, Mapping) and c.get("status") == "True"
    }
    pod = _result_pod(pods)
    terminated = _terminated(pod)
    runner, problem = (
        parse_runner_result(terminated.get("message")) if terminated else (None, "no pod result")
    )
    if "Complete" in conditions:
        return _completed(runner, problem)
    if "Failed" in conditions:
        return _failed(conditions["Failed"], runner, problem, pod, terminated)
    ending = conditions.get("FailureTarget") or conditions.get("SuccessCriteriaMet")
    if ending is not None:
        detail = ending.get("message") or ending.get("reason") or ending.get("type")
        return JobOutcome(JobPhase.RUNNING, _clip(f"finishing: {detail}"))
    if runner is not None and _done_by_its_pod(pods, pod, terminated):
        # The job controller may be half a minute behind the pods (its watches back off while
        # the API server is away); a one-pod Job whose pod succeeded and left its result, with
        # no other pod alive, has nothing in flight and no other end.
        return _completed(runner, problem)
    if _started(status, pods):
        return JobOutcome(JobPhase.RUNNING, "")
    stuck = _cannot_start(pods, now) or _cannot_mount(pods, events)
    if stuck:
        return JobOutcome(JobPhase.STUCK, _clip(f"its pod cannot start: {stuck}"))
    return JobOutcome(JobPhase.PENDING, _waiting_message(pods))


def observe_job(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
    events: Sequence[Mapping[str, Any]] = (),
) -> ObservedJob | None:
    """The FSM's view of an action Job; None for a Job without Lights-Out's identity labels.

    `now` lets a pod the scheduler has refused for `UNSCHEDULABLE_GRACE` count as stuck;
    `events` are the `FailedMount` events of its pods (`parse_job_outcome`)."""
    identity = job_identity(job)
    if identity is None:
        return None
    action, generation, attempt = identity
    outcome = parse_job_outcome(job, pods, now, events)
    return ObservedJob(
        action=action,
        generation=generation,
        attempt=attempt,
        state=outcome.state,
        failed_task=outcome.failed_task,
        message=outcome.message,
        power_state=outcome.power_state,
        values=outcome.values,
        deleting=as_mapping(job.get("metadata")).get("deletionTimestamp") is not None,
    )


def _completed(runner: RunnerResult | None, problem: str) -> JobOutcome:
    if runner is None:
        # Exit 0 without a readable result: the FSM still demands proof of the power state
        # (registration after power-on, a reported Off after power-off).
        return JobOutcome(JobPhase.SUCCEEDED, _clip(f"Job completed but {problem}"))
    if runner.result is OperationResult.FAILED:
        # The runner's verdict wins over its exit code.
        return JobOutcome(
            JobPhase.FAILED,
            runner.message or "the runner reported a failure although the Job completed",
            failed_task=runner.failed_task,
            values=runner.values,
            runner_result=runner.result,
        )
    return JobOutcome(
        JobPhase.SUCCEEDED, runner.message, values=runner.values, runner_result=runner.result
    )


def _failed(
    condition: Mapping[str, Any],
    runner: RunnerResult | None,
    problem: str,
    pod: Mapping[str, Any] | None,
    terminated: Mapping[str, Any],
) -> JobOutcome:
    reason = str(condition.get("reason") or "") or None
    job_says = ": ".join(str(p) for p in (reason, condition.get("message")) if p)
    if runner is not None and runner.result is OperationResult.FAILED:
        message = runner.message or "the playbook failed"
        if reason == "DeadlineExceeded":
            message = f"{message} ({job_says})"
        return JobOutcome(
            JobPhase.FAILED,
            _clip(message),
            failed_task=runner.failed_task,
            values=runner.values,
            reason=reason,
            runner_result=runner.result,
        )
    parts = [job_says or "Job failed"]
    if runner is not None:
        parts.append("although the runner reported success")
    container = _container_failure(pod, terminated)
    if container:
        parts.append(container)
    if runner is None and problem:
        parts.append(problem)
    return JobOutcome(
        JobPhase.FAILED,
        _clip("; ".join(parts)),
        values=runner.values if runner else {},
        reason=reason,
        runner_result=runner.result if runner else None,
    )


def _container_failure(pod: Mapping[str, Any] | None, terminated: Mapping[str, Any]) -> str:
    bits = []
    if terminated:
        bits.append(
            f"container exited with code {terminated.get('exitCode')}"
            + (f" ({terminated['reason']})" if terminated.get("reason") else "")
        )
    pod_status = as_mapping((pod or {}).get("status"))
    if pod_status.get("reason"):
        bits.append(f"pod {pod_status['reason']}: {pod_status.get('message', '')}".rstrip(": "))
    return "; ".join(bits)


def _done_by_its_pod(
    pods: Sequence[Mapping[str, Any]],
    pod: Mapping[str, Any] | None,
    terminated: Mapping[str, Any],
) -> bool:
    """Whether an action Job (one completion, `jobs.build_action_job`) is over by its pods
    alone: the result pod Succeeded (exit 0) and every pod of the Job has stopped."""
    if pod is None:
        return False
    if as_mapping(pod.get("status")).get("phase") != "Succeeded" or terminated.get("exitCode") != 0:
        return False
    return all(as_mapping(p.get("status")).get("phase") in ("Succeeded", "Failed") for p in pods)


def _result_pod(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The pod whose runner finished last, else the newest pod."""
    finished = [p for p in pods if _terminated(p)]
    if finished:
        return max(finished, key=lambda p: str(_terminated(p).get("finishedAt") or ""))
    if not pods:
        return None
    return max(pods, key=lambda p: str(dig(p, "metadata", "creationTimestamp") or ""))


def _container_status(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    for item in _sequence(as_mapping(as_mapping(pod).get("status")).get("containerStatuses")):
        if isinstance(item, Mapping) and item.get("name") == CONTAINER_NAME:
            return item
    return {}


def _terminated(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    status = _container_status(pod)
    return as_mapping(as_mapping(status.get("state")).get("terminated")) or as_mapping(
        as_mapping(status.get("lastState")).get("terminated")
    )


def _started(status: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any container of the Job may have run; when in doubt, yes."""
    if any(as_int(status.get(k)) for k in ("succeeded", "failed", "ready")):
        return True
    if not pods:
        # No pod visible yet: started only if the Job counts an active pod we cannot see.
        return (as_int(status.get("active")) or 0) > 0
    for pod in pods:
        if as_mapping(pod.get("status")).get("phase") in _STARTED_POD_PHASES:
            return True
        state = as_mapping(_container_status(pod).get("state"))
        if state.get("running") or state.get("terminated"):
            return True
    return False


def _cannot_start(pods: Sequence[Mapping[str, Any]], now: datetime | None) -> str:
    """Why a pod of the Job will not start by itself (the kubelet retries, but nothing changes
    until a person acts), or "" while it may still start."""
    for pod in pods:
        waiting = as_mapping(as_mapping(_container_status(pod).get("state")).get("waiting"))
        if waiting.get("reason") in NEVER_STARTS:
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
        for cond in _sequence(as_mapping(pod.get("status")).get("conditions")):
            if (
                isinstance(cond, Mapping)
                and cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
                and _longer_than(cond.get("lastTransitionTime"), now, UNSCHEDULABLE_GRACE)
            ):
                return f"Unschedulable: {cond.get('message', '')}".rstrip(": ")
    return ""


def _cannot_mount(pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]) -> str:
    """The kubelet's word that a pod of the Job cannot mount a Secret or ConfigMap that does not
    exist, or "" (events of an earlier pod of the same name are told apart by uid)."""
    uids = {str(as_mapping(p.get("metadata")).get("uid") or "") for p in pods}
    names = {str(as_mapping(p.get("metadata")).get("name") or "") for p in pods}
    for event in events:
        about = as_mapping(event.get("involvedObject"))
        message = str(event.get("message") or "")
        if (
            event.get("reason") == MOUNT_FAILED
            and about.get("kind") == "Pod"
            and about.get("name") in names
            and (not about.get("uid") or about.get("uid") in uids)
            and MISSING_VOLUME_SOURCE.search(message)
        ):
            return f"{MOUNT_FAILED}: {message}"
    return ""


def _longer_than(since: Any, now: datetime | None, grace: timedelta) -> bool:
    start = parse_time(since)
    return now is not None and start is not None and now - start >= grace


def _waiting_message(pods: Sequence[Mapping[str, Any]]) -> str:
    for pod in pods:
        waiting = as_mapping(as_mapping(_container_status(pod).get("state")).get("waiting"))
        if waiting.get("reason"):
            return _clip(f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": "))
        for cond in _sequence(as_mapping(pod.get("status")).get("conditions")):
            if isinstance(cond, Mapping) and cond.get("status") == "False" and cond.get("reason"):
                return _clip(f"{cond['reason']}: {cond.get('message', '')}".rstrip(": "))
    return "waiting for its pod to start" if pods else "waiting for its pod to be created"


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:_EXCERPT] + ("…" if len(flat) > _EXCERPT else ""))


def _clip(text: str) -> str:
    return clip_middle(text, MESSAGE_LIMIT)


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()
