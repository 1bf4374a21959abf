"""`kubectl get ARGS -o json` answered in-process, for the harness's polling probes.

Every probe used to be a `kubectl` run: ~0.1 CPU-s of its own plus the API server's discovery
and authentication of a fresh connection, thousands of times a suite. Here one API client per
cluster (per kubeconfig) answers with one GET on a kept-alive connection, and the resource
names kubectl accepts (`lsn`, `node`, `jobs`, `nodes.lightsout.dev`, ...) are resolved through
the API's discovery once per cluster, as kubectl would resolve them: short names first, then
plural, singular or kind, the core group before the others in the order the API lists them.

The answer keeps kubectl's shape: the object's JSON as the API serves it (camelCase) without
`metadata.managedFields` (kubectl hides them), and for lists `{"apiVersion": "v1", "kind":
"List", "items": [...]}` whose items carry their apiVersion and kind. `get` returns `UNHANDLED`
for anything it does not map with certainty (other flags, `type/name`, several types, a name
discovery does not know, a 404 that is not an object's NotFound), and the caller runs kubectl.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import urllib3
from kubernetes import client

from lightsout_lab import Cluster

#: Seconds one GET may take (kubectl's runs were bounded by a 120 s subprocess timeout).
REQUEST_TIMEOUT = 120

#: Seconds a discovery stands for names it does not know (a CRD applied since is found after).
REDISCOVERY = 2.0

#: kubectl's page size when it lists (`--chunk-size`).
CHUNK_SIZE = 500


class Unhandled:
    """What `get` returns when kubectl has to answer (see the module's docstring)."""

    def __repr__(self) -> str:
        return "UNHANDLED"


UNHANDLED: Final = Unhandled()

_FLAGS = {
    "-n": "namespace",
    "--namespace": "namespace",
    "-l": "selector",
    "--selector": "selector",
    "--field-selector": "field_selector",
}


@dataclass(frozen=True)
class GetArgs:
    """The `kubectl get` arguments this module handles."""

    resource: str
    name: str | None = None
    namespace: str | None = None
    selector: str | None = None
    field_selector: str | None = None


def parse_get_args(args: Sequence[str]) -> GetArgs | None:
    """`kubectl get` ARGS as one resource type, an optional name and the namespace, label- and
    field-selector flags (`-n X`, `--namespace=X`, ...) in any order; None for anything else."""
    positional: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-"):
            key, eq, value = arg.partition("=")
            field = _FLAGS.get(key)
            if field is None or field in flags:
                return None
            if not eq:
                i += 1
                if i >= len(args):
                    return None
                value = args[i]
            if not value:
                return None
            flags[field] = value
        else:
            positional.append(arg)
        i += 1
    if not 1 <= len(positional) <= 2:
        return None
    resource = positional[0].lower()
    if not resource or "/" in resource or "," in resource:
        return None
    name = positional[1] if len(positional) == 2 else None
    if name is not None and (not name or "selector" in flags or "field_selector" in flags):
        return None  # kubectl refuses a name with a selector
    return GetArgs(
        resource=resource,
        name=name,
        namespace=flags.get("namespace"),
        selector=flags.get("selector"),
        field_selector=flags.get("field_selector"),
    )


@dataclass(frozen=True)
class Resource:
    """One resource type of the API, at its group's preferred version."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        return f"{base}{scope}/{self.plural}" + (f"/{name}" if name else "")


@dataclass(frozen=True)
class ResourceIndex:
    """kubectl's resource names → the resource: short names, then everything else."""

    short: Mapping[str, Resource]
    names: Mapping[str, Resource]

    def lookup(self, token: str) -> Resource | None:
        return self.short.get(token) or self.names.get(token)


def build_index(groups: Iterable[tuple[str, str, Mapping[str, Any]]]) -> ResourceIndex:
    """The index of (group, version, APIResourceList) in priority order (core group first):
    the first group naming a token wins, as in kubectl's priority RESTMapper."""
    short: dict[str, Resource] = {}
    names: dict[str, Resource] = {}
    for group, version, listing in groups:
        for entry in listing.get("resources") or []:
            plural = str(entry.get("name") or "")
            verbs = entry.get("verbs") or []
            if not plural or "/" in plural or "get" not in verbs or "list" not in verbs:
                continue
            kind = str(entry["kind"])
            resource = Resource(group, version, plural, kind, bool(entry.get("namespaced")))
            singular = str(entry.get("singularName") or "") or kind.lower()
            for token in entry.get("shortNames") or []:
                short.setdefault(str(token).lower(), resource)
            tokens = [plural, singular, kind.lower()]
            if group:
                tokens += [f"{t}.{group}" for t in (plural, singular, kind.lower())]
                tokens += [f"{t}.{version}.{group}" for t in (plural, singular, kind.lower())]
            for token in tokens:
                names.setdefault(token, resource)
    return ResourceIndex(short, names)


def shape_list(resource: Resource, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A list as `kubectl get -o json` prints it."""
    return {
        "apiVersion": "v1",
        "items": [
            {"apiVersion": resource.api_version, "kind": resource.kind, **without_managed(i)}
            for i in items
        ],
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }


def without_managed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without metadata.managedFields, which kubectl's output leaves out."""
    found = dict(obj)
    metadata = found.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        found["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return found


class HttpError(Exception):
    """An API answer other than 2xx."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body

    def status_object(self) -> dict[str, Any]:
        """The body when it is a metav1.Status (an object's NotFound is), else {}."""
        try:
            found = json.loads(self.body)
        except ValueError:
            return {}
        return found if isinstance(found, dict) and found.get("kind") == "Status" else {}


class Kube:
    """One cluster's API client and resource index (discovered on first use; again when a
    name is missing, as CRDs arrive after the first probe)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._index: ResourceIndex | None = None
        self._discovered = 0.0
        self._lock = threading.Lock()

    def _raw(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Any:
        """GET path's JSON; HttpError for an answer other than 2xx."""
        method, url, headers, _, _ = self.api.param_serialize(
            "GET",
            path,
            query_params=list(query),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(
            method, url, header_params=headers, _request_timeout=REQUEST_TIMEOUT
        )
        body: bytes = response.read()
        if not 200 <= response.status <= 299:
            raise HttpError(response.status, str(response.reason), body)
        return json.loads(body)

    def _discover(self) -> ResourceIndex:
        groups: list[tuple[str, str, Mapping[str, Any]]] = []
        for version in self._raw("/api").get("versions") or []:
            groups.append(("", version, self._raw(f"/api/{version}")))
        for group in self._raw("/apis").get("groups") or []:
            preferred = group.get("preferredVersion") or (group.get("versions") or [{}])[0]
            version = preferred.get("version")
            if version:
                listing = self._raw(f"/apis/{group['name']}/{version}")
                groups.append((group["name"], version, listing))
        return build_index(groups)

    def resolve(self, token: str) -> Resource | None:
        """The resource kubectl would take `token` for; None when discovery, fresh or at most
        REDISCOVERY seconds old, does not know it (kubectl then answers)."""
        with self._lock:
            stale = time.monotonic() - self._discovered > REDISCOVERY
            if self._index is None or (self._index.lookup(token) is None and stale):
                self._index = self._discover()
                self._discovered = time.monotonic()
            return self._index.lookup(token)

    def forget(self) -> None:
        with self._lock:
            self._index = None

    def get(self, args: Sequence[str]) -> Any:
        """`kubectl get ARGS -o json` parsed, None when NotFound, or UNHANDLED."""
        parsed = parse_get_args(args)
        if parsed is None:
            return UNHANDLED
        try:
            resource = self.resolve(parsed.resource)
        except (HttpError, urllib3.exceptions.HTTPError, OSError, ValueError):
            return UNHANDLED  # kubectl reports the failure in its own words
        if resource is None:
            return UNHANDLED
        namespace = (parsed.namespace or "default") if resource.namespaced else None
        path = resource.path(namespace, parsed.name)
        try:
            if parsed.name is not None:
                return without_managed(self._raw(path))
            return shape_list(resource, self._list(path, parsed))
        except HttpError as error:
            status = error.status_object()
            if status.get("reason") == "NotFound":
                return None
            if error.status == 404:  # not an object's NotFound: the type itself is gone
                self.forget()
                return UNHANDLED
            reason = status.get("reason") or error.reason
            message = status.get("message") or error.body.decode(errors="replace")
            raise AssertionError(
                f"kubectl get {' '.join(args)}: Error from server ({reason}): {message}"
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise AssertionError(f"kubectl get {' '.join(args)}: {error}") from None

    def _list(self, path: str, parsed: GetArgs) -> list[dict[str, Any]]:
        query = [("limit", str(CHUNK_SIZE))]
        if parsed.selector:
            query.append(("labelSelector", parsed.selector))
        if parsed.field_selector:
            query.append(("fieldSelector", parsed.field_selector))
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            page = self._raw(path, [*query, *([("continue", token)] if token else [])])
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items


_clients: dict[tuple[str, int], Kube] = {}
_clients_lock = threading.Lock()


def kube_for(cluster: Cluster) -> Kube | None:
    """The cluster's cached client, keyed by its kubeconfig (path and modification time: a
    restarted cluster writes a new one); None when there is no kubeconfig to read."""
    path = str(cluster.kubeconfig)
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError:
        return None
    with _clients_lock:
        found = _clients.get(key)
        if found is None:
            for stale in [k for k in _clients if k[0] == path]:
                _clients.pop(stale).api.close()
            try:
                api = cluster.api_client()
            except Exception:  # an unreadable kubeconfig: kubectl says why
                return None
            found = _clients[key] = Kube(api)
        return found
