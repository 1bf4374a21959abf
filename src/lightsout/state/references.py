"""Whether the objects a machine names exist, before anything is done with them (pure).

A power action's Job mounts the machine's credentials Secret, its CA Secret and the playbook
overlay ConfigMap, and the machine takes labels, taints and policy from its Group. When one of
them is missing, a Job would sit in ContainerCreating until its deadline (or a machine would run
without its Group's policy), so the Node reconciler (`execution/reconcile.py`) asks `unresolved`
before it lets the state machine start a Job, and the autoscaler's snapshot (`state/build.py`)
asks it before a machine may be chosen.

The caller passes what its watch caches hold: the Group (or None), and for the Secrets and
ConfigMaps of the machine's namespace only their *key names* (`Contents`), never their values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lightsout.models.drivers import REGISTRY
from lightsout.models.enums import Action
from lightsout.state.parse import as_mapping

#: The names of a Secret's or ConfigMap's keys, None when the object does not exist.
Contents = Callable[[str], frozenset[str] | None]
#: Playbook names the runner image ships (`<action>.yml`): an override naming one of them needs
#: no overlay.
SHIPPED_PLAYBOOKS = frozenset(f"{action}.yml" for action in Action)


class ReferenceReason(StrEnum):
    """`status.reason` and the Warning event's reason of a machine held back by a reference."""

    GROUP_NOT_FOUND = "GroupNotFound"
    SECRET_NOT_FOUND = "SecretNotFound"  # noqa: S105 - a reason, not a password
    SECRET_KEY_MISSING = "SecretKeyMissing"  # noqa: S105
    CONFIGMAP_NOT_FOUND = "ConfigMapNotFound"
    PLAYBOOK_NOT_FOUND = "PlaybookNotFound"


@dataclass(frozen=True)
class Unresolved:
    """The first reference of a machine that does not resolve, and a message naming it."""

    reason: ReferenceReason
    message: str


def _driver(spec: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    for kind, block in as_mapping(spec.get("driver")).items():
        if isinstance(block, Mapping):
            return str(kind), block
    return "", {}


def _secret_needs(kind: str, block: Mapping[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(what, Secret name, keys the driver reads) for each Secret the driver block names: the
    driver's own (the registry says which) and the CA every TLS block may name."""
    driver = REGISTRY.get(kind)
    needs = [(n.what, n.name, n.keys) for n in (driver.secrets(block) if driver else ())]
    ca = as_mapping(as_mapping(block.get("tls")).get("caSecretRef"))
    if ca.get("name"):
        needs.append(("CA Secret", str(ca["name"]), (str(ca.get("key", "ca.crt")),)))
    return needs


def unresolved(
    node: Mapping[str, Any],
    group: Mapping[str, Any] | None,
    action: str,
    secrets: Contents | None,
    config_maps: Contents,
) -> Unresolved | None:
    """The first missing reference `action` on this machine needs, or None when all resolve.

    `secrets` None: the caller cannot see Secrets (a cluster-wide operator is given no Secret
    access), so they are not checked here."""
    meta, spec = as_mapping(node.get("metadata")), as_mapping(node.get("spec"))
    namespace = str(meta.get("namespace") or "")
    group_name = str(spec.get("group") or "")
    if group is None:
        return Unresolved(
            ReferenceReason.GROUP_NOT_FOUND,
            f"Group {namespace}/{group_name} not found (spec.group of this machine)",
        )
    kind, block = _driver(spec)
    ephemeral = kind in REGISTRY and REGISTRY[kind].ephemeral
    join = as_mapping(block.get("join")) if ephemeral and action == Action.PROVISION else {}
    k3s = as_mapping(join.get("k3sTokenSecretRef"))
    join_needs = (
        [("k3s token Secret", str(k3s["name"]), (str(k3s.get("key", "token")),))]
        if k3s.get("name")
        else []
    )
    needs = [*_secret_needs(kind, block), *join_needs]
    problem = None if secrets is None else _missing_secret(needs, namespace, secrets)
    if problem is not None:
        return problem
    template = as_mapping(join.get("userDataTemplateRef"))
    if template.get("name"):
        name, key = str(template["name"]), str(template.get("key", "user-data"))
        held = config_maps(name)
        if held is None or key not in held:
            return Unresolved(
                ReferenceReason.CONFIGMAP_NOT_FOUND,
                f"user-data template ConfigMap {namespace}/{name} "
                + ("not found" if held is None else f"has no key {key!r}")
                + " (spec.driver.proxmox.join.userDataTemplateRef)",
            )
    playbooks = as_mapping(spec.get("playbooks"))
    group_playbooks = as_mapping(as_mapping(group.get("spec")).get("playbooks"))
    config_map = playbooks.get("configMapName") or group_playbooks.get("configMapName")
    playbook = playbooks.get(action)
    source = "spec.playbooks" if playbooks.get("configMapName") else f"Group {group_name}"
    if config_map:
        held = config_maps(str(config_map))
        if held is None:
            return Unresolved(
                ReferenceReason.CONFIGMAP_NOT_FOUND,
                f"playbook overlay ConfigMap {namespace}/{config_map} not found ({source})",
            )
    else:
        held = frozenset()
    if playbook and playbook not in held and playbook not in SHIPPED_PLAYBOOKS:
        where = f"ConfigMap {namespace}/{config_map}" if config_map else "no overlay ConfigMap"
        return Unresolved(
            ReferenceReason.PLAYBOOK_NOT_FOUND,
            f"playbook {playbook!r} for {action} (spec.playbooks.{action}) not found: {where}"
            " holds no such key and the runner image ships no playbook of that name",
        )
    return None


def _missing_secret(
    needs: Iterable[tuple[str, str, tuple[str, ...]]], namespace: str, secrets: Contents
) -> Unresolved | None:
    for what, name, keys in needs:
        held = secrets(name)
        if held is None:
            return Unresolved(
                ReferenceReason.SECRET_NOT_FOUND, f"{what} {namespace}/{name} not found"
            )
        missing = [key for key in keys if key not in held]
        if missing:
            return Unresolved(
                ReferenceReason.SECRET_KEY_MISSING,
                f"{what} {namespace}/{name} has no key {', '.join(repr(k) for k in missing)}"
                f" (it has {', '.join(repr(k) for k in sorted(held)) or 'no keys'})",
            )
    return None


def contents_entry(namespace: str, name: str, keys: Iterable[str]) -> dict[str, Any]:
    """A Secret or ConfigMap as a snapshot holds it: where it is and its key names."""
    return {"metadata": {"namespace": namespace, "name": name}, "keys": sorted(keys)}


def contents_index(
    entries: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str], frozenset[str]]:
    """(namespace, name) → key names, from `contents_entry` dicts."""
    found: dict[tuple[str, str], frozenset[str]] = {}
    for entry in entries:
        meta = as_mapping(entry.get("metadata"))
        keys = entry.get("keys") or ()
        found[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = frozenset(
            str(k) for k in keys
        )
    return found
