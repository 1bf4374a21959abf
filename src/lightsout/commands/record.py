"""`lightsout trace record`: watch a live cluster's pods and write what happened as a trace.

For each namespace (or all of them) two watches run, one of pods and one of Jobs (to tell a
CronJob's runs from other Jobs' pods, and to keep a deferrable Job's annotations for its pods'
lines), each a list then a Kubernetes watch from the list's
resourceVersion, resumed from the last resourceVersion seen when the server ends it, and
listed again when that resourceVersion has expired (410 Gone; a pod that went missing in
between is taken as gone then). The machines (Lights-Out Groups and Nodes, with what the
operator learned of their durations) and the CronJobs are listed at the start and again when
the duration is over or on SIGINT/SIGTERM (the first listing is kept if the cluster cannot be
reached then), and `simulate.traces.record.build` turns it all into the trace that
`simulate.traces.trace.write` writes. Called by `cli.cmd_trace_record`; the API calls are
`lightsout.k8s.people`'s (the user's own rights, not the operator's). No Secret is read.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lightsout.k8s import people
from lightsout.k8s.api import Api, error_message
from lightsout.simulate.traces.record import (
    DeferrableJob,
    Observed,
    Seen,
    deferrable_job,
    job_cronjob,
)
from lightsout.state.parse import as_str, dig

Obj = dict[str, Any]
#: How long one watch request lasts before it is resumed (the server ends it then).
WATCH_SECONDS = 60
#: Pause after a failed request before trying again (the API server restarting, a network blip).
RETRY_SECONDS = 2.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Recorder:
    """Pods and Jobs as observed since `start`, kept current by watch threads until `stop`."""

    def __init__(
        self,
        api: Api,
        namespaces: Sequence[str] | None,
        warn: Callable[[str], None],
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        self.api = api
        self.warn = warn
        #: None: every namespace (one cluster-wide watch per kind).
        self.namespaces: Sequence[str | None] = namespaces or [None]
        self.clock = clock
        self.start = clock()
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.pods: dict[str, Seen] = {}
        self.jobs: dict[tuple[str, str], str | None] = {}
        #: The Jobs that may wait for cheap hours: what a trace line keeps of them.
        self.deferrable: dict[tuple[str, str], DeferrableJob] = {}
        self.restarts = 0
        #: The last failure said per kind (an outage is reported once, not at every retry).
        self.said: dict[str, str] = {}
        self.inventory: tuple[tuple[Obj, ...], tuple[Obj, ...]] = ((), ())

    # ------------------------------------------------------------------ collecting
    def _pod(self, event: str, pod: Obj) -> None:
        uid = as_str(dig(pod, "metadata", "uid"))
        if not uid:
            return
        with self.lock:
            seen = self.pods.get(uid)
            gone = seen.gone if seen else None
            if gone is None and (event == "DELETED" or dig(pod, "metadata", "deletionTimestamp")):
                gone = self.clock()
            self.pods[uid] = Seen(pod=pod, gone=gone)

    def _job(self, _event: str, job: Obj) -> None:
        key = (as_str(dig(job, "metadata", "namespace")), as_str(dig(job, "metadata", "name")))
        with self.lock:
            # Kept after the Job is deleted: its pods' records still need to know.
            self.jobs[key] = job_cronjob(job)
            deferral = deferrable_job(job)
            if deferral is not None:
                self.deferrable[key] = deferral

    def _relisted(self, kind: str, namespace: str | None, items: list[Obj]) -> None:
        """After a fresh list: a pod we knew that is not there any more went in between."""
        if kind != "pods":
            return
        present = {as_str(dig(p, "metadata", "uid")) for p in items}
        with self.lock:
            for uid, seen in list(self.pods.items()):
                ns = as_str(dig(seen.pod, "metadata", "namespace"))
                if uid not in present and seen.gone is None and namespace in (None, ns):
                    self.pods[uid] = Seen(pod=seen.pod, gone=self.clock())

    def _follow(self, kind: str, namespace: str | None, handle: Callable[[str, Obj], None]) -> None:
        """List, then watch from the list's resourceVersion until stopped; resume from the last
        version seen when a watch ends, list again when it has expired (410 Gone)."""
        version = ""
        while not self.stopped.is_set():
            try:
                if not version:
                    items, version = people.list_objects(self.api, kind, namespace)
                    self.said.pop(kind, None)
                    self._relisted(kind, namespace, items)
                    for item in items:
                        handle("ADDED", item)
                for event, obj in people.watch_objects(
                    self.api, kind, namespace, version, WATCH_SECONDS
                ):
                    if self.stopped.is_set():
                        return
                    version = as_str(dig(obj, "metadata", "resourceVersion")) or version
                    if event != "BOOKMARK":
                        handle(event, obj)
            except people.ExpiredError:  # list again: what happened meanwhile is in the list
                version = ""
                self.restarts += 1
            except Exception as exc:  # the connection dropped: resume from the same version
                self._pause(kind, exc)

    def _pause(self, kind: str, exc: BaseException) -> None:
        said = f"{kind} watch: {error_message(exc)}; retrying every {RETRY_SECONDS:g}s"
        if self.said.get(kind) != said:  # once per outage, not every retry
            self.said[kind] = said
            self.warn(said)
        self.stopped.wait(RETRY_SECONDS)

    def _inventory(self) -> tuple[tuple[Obj, ...], tuple[Obj, ...]]:
        """The machines (Lights-Out Groups and Nodes) and the CronJobs, listed now."""
        machines: list[Obj] = []
        cronjobs: list[Obj] = []
        for namespace in self.namespaces:
            for plural, kind in (("groups", "Group"), ("nodes", "Node")):
                for item in self.api.list_all_resources(plural, namespace):
                    item.setdefault("kind", kind)  # list items may come without it
                    machines.append(item)
            cronjobs.extend(people.list_objects(self.api, "cronjobs", namespace)[0])
        return tuple(machines), tuple(cronjobs)

    def begin(self) -> None:
        """List the machines and CronJobs once (an unreachable cluster fails here, not after a
        week), then start the watch threads (daemons: one blocked on the network never holds
        the exit)."""
        self.inventory = self._inventory()
        for namespace in self.namespaces:
            for kind, handle in (("jobs", self._job), ("pods", self._pod)):
                thread = threading.Thread(
                    target=self._follow, args=(kind, namespace, handle), daemon=True
                )
                thread.start()

    def finish(self) -> Observed:
        """Stop watching; list the machines (with what the operator learned meanwhile) and
        CronJobs as they are now, or keep the first listing when the cluster cannot be reached
        any more; return all of it."""
        self.stopped.set()
        end = self.clock()
        with self.lock:
            pods = tuple(self.pods.values())
            jobs = dict(self.jobs)
            deferrable = dict(self.deferrable)
        try:
            self.inventory = self._inventory()
        except Exception as exc:  # the cluster went away: what was seen is still worth writing
            self.warn(
                f"machines and CronJobs: {error_message(exc)}; writing those listed at the "
                "start (machines' durations learned since then are missing)"
            )
        machines, cronjobs = self.inventory
        return Observed(
            start=self.start,
            end=end,
            machines=machines,
            cronjobs=cronjobs,
            pods=pods,
            cronjobs_of_jobs=jobs,
            deferrable_jobs=deferrable,
        )


def record(
    api: Api, namespaces: Sequence[str] | None, seconds: float, warn: Callable[[str], None]
) -> Observed:
    """Watch for `seconds`, or until SIGINT/SIGTERM (installed here), and return what was seen;
    `warn` is told of failed requests (they are retried)."""
    import signal

    recorder = Recorder(api, namespaces, warn)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: recorder.stopped.set())
    try:
        recorder.begin()
        deadline = time.monotonic() + seconds
        # In short waits: the signal handlers run on the main thread between them.
        while not recorder.stopped.is_set() and time.monotonic() < deadline:
            recorder.stopped.wait(min(1.0, deadline - time.monotonic()))
        return recorder.finish()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
