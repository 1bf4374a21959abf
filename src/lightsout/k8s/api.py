"""The only code that talks to the Kubernetes API (besides kopf itself).

`Api` owns one client (one connection pool, sized when it is made; in-cluster config, or
KUBECONFIG) and has the typed wrappers over it that the operator and the `lightsout` commands
use: Lights-Out resources and their status, Jobs and their pods, the extravars ConfigMaps and
those holding the prices read from a Home Assistant sensor, Leases with optimistic
concurrency, core Nodes (cordon, labels, taints, delete), pods on a node, the Eviction API and
PodDisruptionBudgets, Events, and one Secret key read by name (a Home Assistant token for the
UPS and price sensor readers). There is no client at module level: each process
makes one `Api` where it starts and passes it down. The operator's is made by its first kopf
start-up handler (`handlers.lifecycle.shared_api`, kept on kopf's memo) and
handed to the reconcilers, the autoscaler, the externalgrpc server and the admission webhook,
which hand it to `execution` (`KubeMachine`, `KubeScale`, `LeaderLease`, and the functions
that write, which take it as their first argument); each `lightsout` command makes its own
(`cli`). Every method takes and returns plain dicts, so the pure layers never see client model
classes. "Not found" comes back as None, "already exists" and "conflict" as the domain
exceptions below; anything else propagates. No usable configuration (no kubeconfig, an invalid
one) is `KubeconfigError`; `cli_problem` turns that, an API server that cannot be reached and
its refusals into the one line a `lightsout` command prints instead of a traceback.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

import urllib3
from kubernetes import client, config
from kubernetes.client import ApiException

from lightsout import API_GROUP, API_VERSION
from lightsout.text import clip_middle

Obj = dict[str, Any]
#: The Lights-Out API's group and version, as the custom-object calls take them.
_OURS = (API_GROUP, API_VERSION)

#: Connections kept open to the API server: one per thread that may call at once. The client's
#: default (5 per CPU) makes a busier operator open and discard a connection per request.
DEFAULT_POOL_SIZE = 8


class KubeconfigError(Exception):
    """No client configuration: no kubeconfig (or an invalid one), and not in a pod."""


class ConflictError(Exception):
    """The object changed since it was read (HTTP 409 on update) or already exists on create."""


class EvictionBlockedError(Exception):
    """The Eviction API refused: a PodDisruptionBudget does not allow the disruption now."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Api:
    """One client of the API server (one connection pool) and the calls made through it."""

    def __init__(
        self, pool_size: int = DEFAULT_POOL_SIZE, connect_timeout: float | None = None
    ) -> None:
        """In-cluster config, or KUBECONFIG (KubeconfigError when neither is usable);
        `pool_size` connections at most (the operator's start-up gives its worker count plus
        room for the other handlers). `connect_timeout` (seconds, TLS handshake included)
        bounds each call's connecting that sets no timeout of its own: a command gives up on
        an API server that does not answer instead of waiting for the kernel's."""
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get(
            "KUBECONFIG"
        )
        try:
            if in_cluster:
                config.load_incluster_config()
                configuration = client.Configuration.get_default_copy()
            else:
                configuration = client.Configuration()
                config.load_kube_config(
                    config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
                )
        except config.ConfigException as exc:
            raise KubeconfigError(_config_problem(exc, in_cluster)) from exc
        configuration.connection_pool_maxsize = max(1, pool_size)
        self.client = client.ApiClient(configuration)
        if connect_timeout is not None:
            _default_connect_timeout(self.client, connect_timeout)

    # ------------------------------------------------------------ Lights-Out resources
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.client)

    def patch_status(
        self,
        namespace: str,
        plural: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Obj:
        """Merge-patch the status; with `resource_version`, only if the object is still at it
        (else ConflictError): status computed from a stale read never overwrites a newer one."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        call = self.custom().patch_namespaced_custom_object_status
        return _raw(call, *_OURS, namespace, plural, name, body)

    def get_resource(self, namespace: str, plural: str, name: str) -> Obj | None:
        return _get(self.custom().get_namespaced_custom_object, *_OURS, namespace, plural, name)

    # ------------------------------------------------------------ Jobs and ConfigMaps
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.client)

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.client)

    def get_job(self, namespace: str, name: str) -> Obj | None:
        return _get(self.batch().read_namespaced_job, name, namespace)

    def list_jobs(
        self, namespace: str | None = None, label_selector: str = "!app.kubernetes.io/managed-by"
    ) -> list[Obj]:
        """Jobs matching the selector in one namespace, or in all of them; by default people's
        Jobs (not the operator's own action and health-check Jobs, which carry managed-by)."""
        batch = self.batch()
        data = _listed(
            batch.list_namespaced_job, batch.list_job_for_all_namespaces, namespace, label_selector
        )
        return _typed_items(data, "batch/v1", "Job")

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create the Job; raises ConflictError when one of that (deterministic) name exists."""
        return _raw(self.batch().create_namespaced_job, namespace, dict(body))

    def delete_job(self, namespace: str, name: str) -> None:
        # Foreground: the Job stays visible (and counts as active) until its pods are gone,
        # so no new power Job can start while a cancelled one's pod might still run.
        _gone_is_fine(
            self.batch().delete_namespaced_job, name, namespace, propagation_policy="Foreground"
        )

    def release_job(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Let a held Job start (`spec.suspend: false`) and set the annotations (None removes
        one) in the same merge patch; a Job deleted meanwhile is fine."""
        patch = {"spec": {"suspend": False}, "metadata": {"annotations": dict(annotations)}}
        self._patch_job(namespace, name, patch)

    def annotate_job(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        """Set the Job's annotations (None removes one); a Job deleted meanwhile is fine."""
        self._patch_job(namespace, name, {"metadata": {"annotations": dict(annotations)}})

    def _patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        # A merge patch, not the client's default strategic one for a dict: the same for these
        # fields, and what the callers are told.
        call = self.batch().patch_namespaced_job
        merge = "application/merge-patch+json"
        _gone_is_fine(_raw, call, name, namespace, dict(patch), _content_type=merge)

    def job_pods(self, namespace: str, job_name: str) -> list[Obj]:
        call = self.core().list_namespaced_pod
        return _items(call, namespace, label_selector=f"job-name={job_name}")

    def apply_configmap(self, namespace: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        try:
            _raw(self.core().create_namespaced_config_map, namespace, dict(body))
        except ConflictError:
            _raw(self.core().replace_namespaced_config_map, name, namespace, dict(body))

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        return _get(self.core().read_namespaced_config_map, name, namespace)

    def delete_configmap(self, namespace: str, name: str) -> None:
        _gone_is_fine(self.core().delete_namespaced_config_map, name, namespace)

    # ------------------------------------------------------------ CronJobs
    def get_cronjob(self, namespace: str, name: str) -> Obj | None:
        return _get(self.batch().read_namespaced_cron_job, name, namespace)

    def create_cronjob(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create the CronJob; raises ConflictError when it exists."""
        return _raw(self.batch().create_namespaced_cron_job, namespace, dict(body))

    def replace_cronjob(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        return _raw(self.batch().replace_namespaced_cron_job, name, namespace, dict(body))

    def delete_cronjob(self, namespace: str, name: str) -> None:
        # Background: its Jobs and their pods go with it (they are owned by it).
        call = self.batch().delete_namespaced_cron_job
        _gone_is_fine(call, name, namespace, propagation_policy="Background")

    # ------------------------------------------------------------ Leases
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.client)

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        return _get(self.coordination().read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return _raw(self.coordination().create_namespaced_lease, namespace, dict(body))

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        """Replace with body's resourceVersion; a concurrent writer makes this raise
        ConflictError."""
        return _raw(self.coordination().replace_namespaced_lease, name, namespace, dict(body))

    def list_leases(self, namespace: str, label_selector: str) -> list[Obj]:
        call = self.coordination().list_namespaced_lease
        return _items(call, namespace, label_selector=label_selector)

    def delete_leases(self, namespace: str, label_selector: str) -> None:
        self.coordination().delete_collection_namespaced_lease(
            namespace, label_selector=label_selector
        )

    def uid_at(
        self, group: str, version: str, plural: str, *, namespace: str | None, name: str
    ) -> str | None:
        """The uid of the object now named so (None: there is none), for each kind the operator
        watches: tells an object deleted while a watch was away from one made again under its
        name. Typed reads, one per kind, so that the chart's rules can be derived from them."""
        del version  # each kind has the one version the operator watches
        core, batch = self.core(), self.batch()
        policy, apps = client.PolicyV1Api(self.client), client.AppsV1Api(self.client)
        namespaced_reads = {
            ("", "pods"): core.read_namespaced_pod,
            ("", "configmaps"): core.read_namespaced_config_map,
            ("batch", "jobs"): batch.read_namespaced_job,
            ("batch", "cronjobs"): batch.read_namespaced_cron_job,
            ("coordination.k8s.io", "leases"): self.coordination().read_namespaced_lease,
            ("policy", "poddisruptionbudgets"): policy.read_namespaced_pod_disruption_budget,
            ("apps", "daemonsets"): apps.read_namespaced_daemon_set,
        }
        if group == API_GROUP:
            found = self.get_resource(namespace or "", plural, name)
        elif (group, plural) == ("", "nodes"):
            found = self.get_node(name)
        else:
            found = _get(namespaced_reads[(group, plural)], name, namespace)
        return None if found is None else str(found["metadata"]["uid"])

    # ------------------------------------------------------------ core Nodes and pods
    def get_node(self, name: str) -> Obj | None:
        return _get(self.core().read_node, name)

    def create_node(self, body: Mapping[str, Any]) -> Obj:
        """Create a core Node; ConflictError when one of that name exists (its kubelet was
        first)."""
        return _raw(self.core().create_node, dict(body))

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> Obj:
        return _raw(self.core().patch_node, name, dict(patch))

    def delete_node(self, name: str, resource_version: str | None = None) -> None:
        """Delete the Node (gone already is fine); with `resource_version`, only if it has not
        changed since that read (a 409 Conflict otherwise, raised as `ConflictError`)."""
        options = None
        if resource_version is not None:
            preconditions = client.V1Preconditions(resource_version=resource_version)
            options = client.V1DeleteOptions(preconditions=preconditions)
        try:
            self.core().delete_node(name, body=options)
        except ApiException as exc:
            if exc.status == 409:
                raise ConflictError(f"Node {name} changed since it was read") from exc
            if exc.status != 404:
                raise

    def put_webhook_configuration(self, body: Mapping[str, Any]) -> None:
        """Create the Mutating- or ValidatingWebhookConfiguration (by `kind`), or replace the
        one of that name."""
        admission = client.AdmissionregistrationV1Api(self.client)
        kind = "mutating" if body["kind"] == "MutatingWebhookConfiguration" else "validating"
        name = body["metadata"]["name"]
        current = _get(getattr(admission, f"read_{kind}_webhook_configuration"), name)
        if current is None:
            _raw(getattr(admission, f"create_{kind}_webhook_configuration"), dict(body))
            return
        version = current["metadata"]["resourceVersion"]
        replacement = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
        _raw(getattr(admission, f"replace_{kind}_webhook_configuration"), name, replacement)

    def pods_on_node(self, node_name: str) -> list[Obj]:
        call = self.core().list_pod_for_all_namespaces
        return _items(call, field_selector=f"spec.nodeName={node_name}")

    def evict(self, namespace: str, name: str) -> None:
        """Ask the Eviction API to evict a pod; EvictionBlockedError when a PDB forbids it now."""
        body: Any = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            self.core().create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return
            if exc.status == 429:
                raise EvictionBlockedError(_status_message(exc)) from exc
            raise

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod with its own grace period (a drain past its deadline); gone is fine."""
        _gone_is_fine(self.core().delete_namespaced_pod, name, namespace)

    # ------------------------------------------------------------ Events
    def post_event(
        self,
        involved: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        component: str = "lightsout",
    ) -> None:
        """Post a core/v1 Event about a Lights-Out object (used outside kopf's own posting)."""
        meta = involved["metadata"]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", f"{API_GROUP}/{API_VERSION}"),
                "kind": involved.get("kind", "Node"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": clip_middle(message),
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": component,
        }
        _raw(self.core().create_namespaced_event, meta["namespace"], body)

    # ------------------------------------------------------------ the autoscaler's reads/writes
    def patch_resource(
        self, namespace: str, plural: str, name: str, patch: Mapping[str, Any]
    ) -> Obj:
        """Merge-patch a Lights-Out resource (spec or metadata). A `metadata.resourceVersion`
        in the patch makes it conditional: ConflictError when the object changed since it was
        read."""
        call = self.custom().patch_namespaced_custom_object
        return _raw(call, *_OURS, namespace, plural, name, dict(patch))

    def list_all_resources(self, plural: str, namespace: str | None = None) -> list[Obj]:
        """Lights-Out resources of one kind in one namespace, or in all of them."""
        if namespace:
            return _items(self.custom().list_namespaced_custom_object, *_OURS, namespace, plural)
        return _items(self.custom().list_cluster_custom_object, *_OURS, plural)

    def list_pods(self, namespace: str | None = None) -> list[Obj]:
        core = self.core()
        data = _listed(core.list_namespaced_pod, core.list_pod_for_all_namespaces, namespace)
        return _typed_items(data, "v1", "Pod")

    def list_core_nodes(self) -> list[Obj]:
        return _typed_items(_raw(self.core().list_node), "v1", "Node")

    def list_pdbs(self, namespace: str | None = None) -> list[Obj]:
        policy = client.PolicyV1Api(self.client)
        data = _listed(
            policy.list_namespaced_pod_disruption_budget,
            policy.list_pod_disruption_budget_for_all_namespaces,
            namespace,
        )
        return _typed_items(data, "policy/v1", "PodDisruptionBudget")

    def list_daemonsets(self, namespace: str | None = None) -> list[Obj]:
        apps = client.AppsV1Api(self.client)
        data = _listed(
            apps.list_namespaced_daemon_set, apps.list_daemon_set_for_all_namespaces, namespace
        )
        return _typed_items(data, "apps/v1", "DaemonSet")

    def list_cronjobs(self, namespace: str | None = None) -> list[Obj]:
        """People's CronJobs (not the operator's own health checks, which carry managed-by)."""
        batch = self.batch()
        data = _listed(
            batch.list_namespaced_cron_job,
            batch.list_cron_job_for_all_namespaces,
            namespace,
            "!app.kubernetes.io/managed-by",
        )
        return _typed_items(data, "batch/v1", "CronJob")

    def list_key_names(
        self, kind: str, namespace: str | None = None
    ) -> list[tuple[str, str, frozenset[str]]]:
        """Secrets (`kind` "secret") or ConfigMaps ("config_map") as (namespace, name, key
        names): `lightsout plan` checks what machines reference; the values are dropped on
        arrival."""
        core = self.core()
        namespaced, everywhere = {
            "secret": (core.list_namespaced_secret, core.list_secret_for_all_namespaces),
            "config_map": (
                core.list_namespaced_config_map,
                core.list_config_map_for_all_namespaces,
            ),
        }[kind]
        data = _listed(namespaced, everywhere, namespace)
        return [
            (
                str(item["metadata"].get("namespace") or ""),
                str(item["metadata"]["name"]),
                key_names(item),
            )
            for item in data.get("items", [])
        ]

    def list_labelled_config_maps(self, label: str, namespace: str | None = None) -> list[Obj]:
        """ConfigMaps carrying `label` (any value), whole: the series `lightsout plan` prices
        deferrable Jobs by (`lightsout.dev/series`)."""
        core = self.core()
        data = _listed(
            core.list_namespaced_config_map,
            core.list_config_map_for_all_namespaces,
            namespace,
            label,
        )
        return _typed_items(data, "v1", "ConfigMap")

    # ------------------------------------------------------------ Secrets (join credentials)
    def cluster_ca(self) -> bytes:
        """The PEM CA bundle this client trusts for the API server (in-cluster: the SA's
        ca.crt).

        It is what a new machine must trust too, so `execution.join` hands it to a clone.
        """
        configuration = self.client.configuration
        if configuration.ssl_ca_cert:
            with open(configuration.ssl_ca_cert, "rb") as ca:
                return ca.read()
        raise RuntimeError("the API client has no CA file: cannot tell a new machine what to trust")

    def create_secret(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create the Secret; raises ConflictError when one of that name exists."""
        _raw(self.core().create_namespaced_secret, namespace, dict(body))

    def delete_secrets(self, namespace: str, label_selector: str) -> None:
        """Delete the Secrets matching the selector (deletecollection: no right to read any)."""
        self.core().delete_collection_namespaced_secret(namespace, label_selector=label_selector)

    # ------------------------------------------------------------ Secrets (Home Assistant tokens)
    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret as text, surrounding whitespace removed (a file's last newline);
        None when the Secret does not exist, KeyError(key) when it has no such key,
        PermissionError when the operator may not read it (the chart grants `get` only on the
        Secrets its `upsTokenSecrets` names), ValueError when the value is not UTF-8 text.

        Only the UPS reader calls it, for a Home Assistant token
        (`execution.ups_homeassistant`); the rest of the Secret is dropped here, and no error
        carries the value.
        """
        try:
            found = _get(self.core().read_namespaced_secret, name, namespace)
        except ApiException as exc:
            if exc.status == 403:
                raise PermissionError(error_message(exc)) from None
            raise
        if found is None:
            return None
        data = found.get("data") or {}
        if key not in data:
            raise KeyError(key)
        try:
            return base64.b64decode(data[key]).decode().strip()
        except (ValueError, UnicodeDecodeError):
            raise ValueError(f"key {key} of Secret {namespace}/{name} is not text") from None


# ---------------------------------------------------------------- without a client
def _get(call: Any, *args: Any) -> Obj | None:
    try:
        return cast(Obj, call(*args, _preload_content=False).json())
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _listed(
    namespaced: Callable[..., Any],
    everywhere: Callable[..., Any],
    namespace: str | None,
    selector: str | None = None,
) -> Obj:
    """One list call (with a label selector, if one is given): in `namespace`, or in every
    namespace. The client sends no selector for None."""
    if namespace:
        return _raw(namespaced, namespace, label_selector=selector)
    return _raw(everywhere, label_selector=selector)


def _raw(call: Any, *args: Any, **kwargs: Any) -> Obj:
    try:
        return cast(Obj, call(*args, _preload_content=False, **kwargs).json())
    except ApiException as exc:
        if exc.status == 409:
            raise ConflictError(str(exc.reason)) from exc
        raise


def _items(call: Any, *args: Any, **kwargs: Any) -> list[Obj]:
    return cast(list[Obj], _raw(call, *args, **kwargs).get("items", []))


def _gone_is_fine(call: Any, *args: Any, **kwargs: Any) -> None:
    """Make the call (a delete, a patch); an object already gone (404) is fine."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _typed_items(data: Obj, api_version: str, kind: str) -> list[Obj]:
    # List responses leave apiVersion/kind off their items; consumers of plain dicts want them.
    items = cast(list[Obj], data.get("items", []))
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items


def _config_problem(exc: config.ConfigException, in_cluster: bool) -> str:
    """Which configuration was looked for, and what is wrong with it, in one line."""
    if in_cluster:
        return f"cannot use the pod's in-cluster configuration: {exc}"
    named = os.environ.get("KUBECONFIG")
    paths = [p for p in (named or "").split(os.pathsep) if p] or [
        os.path.expanduser(config.KUBE_CONFIG_DEFAULT_LOCATION)
    ]
    where = ", ".join(paths) + (" (KUBECONFIG)" if named else "")
    if not any(os.path.exists(path) for path in paths):
        return f"no kubeconfig: {where} does not exist, and this is not a pod in a cluster"
    return f"invalid kubeconfig {where}: {exc}"


def _default_connect_timeout(api_client: client.ApiClient, seconds: float) -> None:
    """Every request of `api_client` that names no `_request_timeout` connects within
    `seconds` (its reading stays unbounded: watches and logs stream for as long as they
    last)."""
    request = api_client.rest_client.request

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):  # (the client passes it by name, or None)
            kwargs["_request_timeout"] = (seconds, None)
        return request(*args, **kwargs)

    api_client.rest_client.request = bounded  # type: ignore[method-assign]


def error_message(exc: BaseException) -> str:
    """What a person needs from a failed call: the API server's status code and message, or
    why it could not be reached."""
    if isinstance(exc, ApiException):
        return f"{exc.status} {_status_message(exc)}"
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        return _unreachable(exc)
    return str(exc) or type(exc).__name__


def cli_problem(exc: BaseException) -> str | None:
    """The one line a command prints (after `error: `) for a failure to configure, reach or be
    served by the API server, as kubectl says it; None for anything else (a bug: it keeps its
    traceback)."""
    if isinstance(exc, KubeconfigError):
        return str(exc)
    if isinstance(exc, ApiException):
        said = error_message(exc)
        if exc.status == 401:
            return f"{said} (the API server does not accept the kubeconfig's credentials)"
        if exc.status == 404 and not _names_an_object(exc):
            # An object that is not there is each command's to say; a kind that is not there
            # is the CRDs'.
            install = "`lightsout crds | kubectl apply -f -`"
            return f"{said} (are the Lights-Out CRDs installed? {install})"
        return said
    if isinstance(exc, ConflictError):
        return f"409 conflict: {exc}"
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return error_message(exc)
    return None


def _unreachable(exc: urllib3.exceptions.MaxRetryError) -> str:
    """`cannot reach the API server https://host:port: connection refused` (or timed out, or
    the name does not resolve, or the TLS handshake failed)."""
    pool = exc.pool
    where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else str(exc.url)
    reason = exc.reason
    cause = reason.__cause__ if reason is not None else None
    if isinstance(cause, OSError) and cause.strerror:  # refused, no route, unknown name
        why = cause.strerror[:1].lower() + cause.strerror[1:]
    elif isinstance(cause, TimeoutError) or isinstance(
        reason, urllib3.exceptions.ConnectTimeoutError | urllib3.exceptions.ReadTimeoutError
    ):  # (urllib3's NewConnectionError is a ConnectTimeoutError too: its cause says which)
        why = "timed out: it does not answer"
    else:
        why = str(reason or exc)
    return f"cannot reach the API server {where}: {why}"


def _names_an_object(exc: ApiException) -> bool:
    try:
        details = json.loads(exc.body or "{}").get("details") or {}
    except (ValueError, AttributeError):
        return False
    return bool(details.get("name"))


def _status_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def key_names(obj: Mapping[str, Any]) -> frozenset[str]:
    """The key names of a Secret or ConfigMap object (its values are not looked at)."""
    return frozenset(
        str(key) for part in ("data", "binaryData", "stringData") for key in obj.get(part) or {}
    )


# ---------------------------------------------------------------- the CLI's defaults
def current_namespace() -> str:
    """The namespace kubectl would use: the kubeconfig context's, the pod's own in-cluster,
    else `default`."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
        try:
            with open(path) as handle:
                return handle.read().strip() or "default"
        except OSError:
            return "default"
    try:
        _, active = config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG"))
    except (config.ConfigException, OSError):
        return "default"
    return str((active or {}).get("context", {}).get("namespace") or "default")
