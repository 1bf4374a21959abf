"""Recording every watch event of some objects while a test changes things, for assertions on
what happened in between (how many Jobs were created, every state a Node passed through)
rather than on what is left at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch


class Recorder:
    """Every watch event of `call`'s objects (one object when `name` is given), from before
    the change under test; a context manager."""

    def __init__(self, call: Callable[..., Any], name: str | None = None, **kwargs: Any) -> None:
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._call = call
        self._kwargs = {**kwargs, **({"field_selector": f"metadata.name={name}"} if name else {})}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        version = None
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self._call,
                    resource_version=version,
                    timeout_seconds=5,
                    _preload_content=False,
                    **self._kwargs,
                ):
                    obj = event["raw_object"]
                    version = obj["metadata"]["resourceVersion"]
                    self.events.append((time.monotonic(), event["type"], obj))
                    if self._stop.is_set():
                        break
            except Exception:  # a 410 Gone or a dropped stream: list again from scratch
                version = None
                self._stop.wait(0.2)

    def objects(self) -> list[dict[str, Any]]:
        return [obj for _, kind, obj in self.events if kind != "DELETED"]

    def uids(self) -> set[str]:
        """Every object seen, by uid: each one created (or there before) counts once."""
        return {str(obj["metadata"]["uid"]) for _, _, obj in self.events}
