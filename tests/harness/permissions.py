"""What the operator's code asks of the Kubernetes API, as RBAC rules: (apiGroup, resource, verb).

Derived from the source, not written down by hand, so a new API call without a matching rule
(or a rule nothing uses any more) is noticed: every method of the official client called in
`lightsout.k8s.api` is translated by its name (`create_namespaced_job` → batch jobs create), and
every resource a kopf handler watches needs list and watch. kopf itself also scans CRDs and
namespaces, and patches its progress annotations onto the resources it handles. Two sets are
granted only as the chart's values say: Secret list/watch with `watchNamespaces`, Secret get
(by name) with `upsTokenSecrets`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API_MODULE = ROOT / "src" / "lightsout" / "k8s" / "api.py"
HANDLERS = ROOT / "src" / "lightsout" / "handlers"
OWN_GROUP = "lightsout.dev"
OWN_PLURALS = ("nodes", "groups")

Rule = tuple[str, str, str]

#: The client objects of `lightsout.k8s.api.Api` (methods or local names) → their API group.
CLIENT_GROUPS = {
    "core": "",
    "batch": "batch",
    "coordination": "coordination.k8s.io",
    "policy": "policy",
    "apps": "apps",
    "custom": OWN_GROUP,
}
VERBS = {"read": "get", "get": "get", "list": "list", "create": "create", "delete": "delete"}
VERBS |= {"replace": "update", "patch": "patch"}
#: Client kinds (snake_case) whose plural is not simply kind + "s".
PLURALS = {
    "pod_eviction": "pods/eviction",
    "pod_disruption_budget": "poddisruptionbudgets",
    "daemon_set": "daemonsets",
    "config_map": "configmaps",
    "cron_job": "cronjobs",
}
#: kopf's own needs, whatever the handlers are: it discovers CRDs and namespaces.
KOPF_SCANNING: set[Rule] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
}
#: Watched by a namespaced operator only (`handlers.watch_secrets`): a cluster-wide one is
#: given no Secret access.
NAMESPACED_ONLY: set[Rule] = {("", "secrets", "list"), ("", "secrets", "watch")}
#: Granted only with the chart's `upsTokenSecrets`, and then only on the Secrets it names
#: (`resourceNames`): the Home Assistant tokens of UPS sources and price sensors
#: (`Api.read_secret_key`).
BY_NAME_ONLY: set[Rule] = {("", "secrets", "get")}
# A decorator, or a registration call (`kopf.index("", "v1", "secrets", ...)(fn)`).
_DECORATOR = re.compile(
    r"@?kopf\.(?:index|daemon|timer|on\.\w+)\(\s*(API_GROUP|\"[^\"]*\")\s*,\s*"
    r"(?:API_VERSION|\"[^\"]*\")\s*,\s*\"([a-z]+)\""
)


def _client_of(call: ast.expr) -> str | None:
    """`self.core().x` → core, `policy.x` → policy (a local client object)."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        return call.func.attr if call.func.attr in CLIENT_GROUPS else None
    if isinstance(call, ast.Name) and call.id in CLIENT_GROUPS:
        return call.id
    return None


def method_rules(client: str, method: str) -> set[Rule]:
    verb_word, _, rest = method.partition("_")
    verb = VERBS[verb_word]
    if rest.startswith("collection_"):  # delete_collection_namespaced_secret
        verb, rest = "deletecollection", rest.removeprefix("collection_")
    kind = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    if client == "custom":
        status = kind.endswith("_status")
        return {(OWN_GROUP, p + ("/status" if status else ""), verb) for p in OWN_PLURALS}
    return {(CLIENT_GROUPS[client], PLURALS.get(kind, kind + "s"), verb)}


def api_calls() -> set[Rule]:
    rules: set[Rule] = set()
    for node in ast.walk(ast.parse(API_MODULE.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and (client := _client_of(node.value))
            and node.attr.partition("_")[0] in VERBS
        ):
            rules |= method_rules(client, node.attr)
    return rules


def watched() -> set[Rule]:
    rules: set[Rule] = set()
    for path in HANDLERS.glob("*.py"):
        for group, plural in _DECORATOR.findall(path.read_text()):
            api_group = OWN_GROUP if group == "API_GROUP" else group.strip('"')
            rules |= {(api_group, plural, "list"), (api_group, plural, "watch")}
    return rules


def used(all_namespaces: bool = False, ups_tokens: bool = False) -> set[Rule]:
    """Every (apiGroup, resource, verb) the operator needs (watching every namespace, or some;
    reading Home Assistant tokens by name, or not)."""
    rules = api_calls() | watched() | KOPF_SCANNING
    if all_namespaces:
        rules -= NAMESPACED_ONLY
    return rules if ups_tokens else rules - BY_NAME_ONLY
