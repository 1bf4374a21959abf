"""The Helm chart (deploy/helm/lightsout): it lints, renders, asks for least privilege only, and
its pods meet the restricted Pod Security Standard. Helm is built from Go modules
(tools/helm/build.sh); install on the local cluster is the install issue's e2e test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightsout.execution import registration
from lightsout.handlers import admission
from lightsout_lab.binaries import find_helm
from tests.harness.ca_flags import readme_flags
from tests.harness.permissions import used

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "lightsout"
RBAC_KINDS = ("ClusterRole", "Role")
#: The local control plane's version (tools/controlplane/build.sh).
KUBE_VERSION = "1.34.9"


def helm() -> str:
    return str(find_helm())


def render(*sets: str) -> list[dict[str, Any]]:
    argv = [helm(), "template", "lo", str(CHART), "--namespace", "lightsout-system"]
    argv += ["--kube-version", KUBE_VERSION]
    for value in sets:
        argv += ["--set", value]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for doc in docs
        if doc["kind"] in RBAC_KINDS
        for rule in doc.get("rules", ())
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_chart_lints() -> None:
    linted = subprocess.run(
        [helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True, check=False
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize(
    "sets",
    [(), ("watchNamespaces={lab,media}",), ("upsTokenSecrets={ha-ups}",)],
    ids=["all", "two", "ups-tokens"],
)
def test_rbac_grants_exactly_what_the_code_uses(sets: tuple[str, ...]) -> None:
    docs = render(*sets)
    rules = [r for d in docs if d["kind"] in RBAC_KINDS for r in d.get("rules", ())]
    wildcards = [r for r in rules if "*" in r["apiGroups"] + r["resources"] + r["verbs"]]
    assert wildcards == []
    watching = any(s.startswith("watchNamespaces=") for s in sets)
    tokens = any(s.startswith("upsTokenSecrets=") for s in sets)
    have, need = granted(docs), used(all_namespaces=not watching, ups_tokens=tokens)
    assert sorted(have - need) == [], "rules nothing in the operator uses"
    assert sorted(need - have) == [], "calls the operator makes without a rule"


def test_secrets_are_never_listed_cluster_wide() -> None:
    """Without watchNamespaces the namespaced rules are bound cluster-wide: they then hold no
    Secret read (the operator does not watch Secrets there)."""
    for sets in ((), ("watchNamespaces={lab}",)):
        docs = render(*sets)
        reads = {
            (d["kind"], verb)
            for d in docs
            if d["kind"] in RBAC_KINDS
            for r in d.get("rules", ())
            if "secrets" in r["resources"]
            for verb in r["verbs"]
            if verb in {"get", "list", "watch"}
        }
        assert reads == (set() if not sets else {("ClusterRole", "list"), ("ClusterRole", "watch")})
    cluster_wide = {b["roleRef"]["name"] for b in of_kind(render(), "ClusterRoleBinding")}
    assert "lo-machines" in cluster_wide


def test_home_assistant_tokens_are_read_by_name_only_and_only_when_named() -> None:
    """`upsTokenSecrets` grants `get` on those Secrets (by name), nothing else on any other."""
    for sets in ((), ("watchNamespaces={lab}",)):
        gets = [r for r in _secret_rules(render(*sets)) if "get" in r["verbs"]]
        assert gets == [], "no Secret is read by name unless the values name it"
    for sets in (
        ("upsTokenSecrets={ha-ups,rack}",),
        ("upsTokenSecrets={ha-ups}", "watchNamespaces={lab}"),
    ):
        gets = [r for r in _secret_rules(render(*sets)) if "get" in r["verbs"]]
        names = sets[0].partition("=")[2].strip("{}").split(",")
        assert gets == [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": names, "verbs": ["get"]}
        ]


def _secret_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r
        for d in docs
        if d["kind"] in RBAC_KINDS
        for r in d.get("rules", ())
        if "secrets" in r["resources"]
    ]


def test_watched_namespaces_bind_the_operator_there_only_and_jobs_get_a_rightless_account() -> None:
    docs = render("watchNamespaces={lab,media}")
    bindings = of_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == [
        "kube-node-lease",  # kubelets' heartbeats, read before a power-off without a meter
        "kube-system",  # bootstrap tokens of clones that join by themselves
        "lab",
        "lightsout-system",  # the autoscaler's leader Lease lives here
        "media",
    ]
    cluster_bound = {b["roleRef"]["name"] for b in of_kind(docs, "ClusterRoleBinding")}
    assert cluster_bound == {"lo-cluster"}, "the namespaced rules are not bound cluster-wide"
    cluster_rules = granted(of_kind(docs, "ClusterRole")[:1])
    assert not any(group == "lightsout.dev" or res == "jobs" for group, res, _ in cluster_rules)

    runners = [a for a in of_kind(docs, "ServiceAccount") if a["metadata"]["name"] == "lo-runner"]
    assert sorted(a["metadata"]["namespace"] for a in runners) == ["lab", "media"]
    assert all(a["automountServiceAccountToken"] is False for a in runners)
    subjects = [s["name"] for b in docs if "subjects" in b for s in b["subjects"]]
    assert "lo-runner" not in subjects, "action Jobs' account has no rights at all"

    (deployment,) = of_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LIGHTSOUT_JOB_SERVICE_ACCOUNT"] == "lo-runner"
    assert "--namespace=lab" in container["args"] and "--namespace=media" in container["args"]


def test_operator_pod_meets_the_restricted_pod_security_standard() -> None:
    (deployment,) = of_kind(
        render("jobs.nodeSelector.role=always-on", "jobs.hostNetwork=true"), "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["readOnlyRootFilesystem"] is True
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert container["livenessProbe"]["timeoutSeconds"] >= 5, "a busy event loop is alive"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["LIGHTSOUT_JOB_NODE_SELECTOR"] == "role=always-on"
        assert env["LIGHTSOUT_JOB_HOST_NETWORK"] == "true"
        assert "hostNetwork" not in pod, "the operator's own pod stays off the host network"
    assert deployment["spec"]["replicas"] >= 2


def test_externalgrpc_server_is_served_over_mtls_from_a_secret_with_a_grpc_probe() -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("-externalgrpc")]
    docs = render("externalgrpc.enabled=true", "externalgrpc.tlsSecretName=lo-grpc-tls")
    (service,) = [d for d in of_kind(docs, "Service") if d["metadata"]["name"] == "lo-externalgrpc"]
    assert service["spec"]["ports"][0]["port"] == 8086
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LIGHTSOUT_GRPC_ADDRESS"] == "0.0.0.0:8086"
    assert env["LIGHTSOUT_GRPC_TLS_CLIENT_CA"] == "/etc/lightsout-grpc/ca.crt"
    assert "LIGHTSOUT_GRPC_INSECURE" not in env
    assert {"name": "externalgrpc-tls", "secret": {"secretName": "lo-grpc-tls"}} in pod["volumes"]
    assert container["readinessProbe"]["grpc"]["port"] == 8087
    # Neither TLS nor an explicit plaintext: the chart refuses to render.
    with pytest.raises(subprocess.CalledProcessError):
        render("externalgrpc.enabled=true")


def test_prometheus_finds_the_replicas_and_keeps_the_machines_namespace_label() -> None:
    assert of_kind(render(), "ServiceMonitor") == []
    docs = render("metrics.serviceMonitor.enabled=true", "metrics.podAnnotations=true")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    services = [
        s
        for s in of_kind(docs, "Service")
        if any(p["name"] == "metrics" for p in s["spec"]["ports"])
    ]
    (service,) = services
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (deployment,) = of_kind(docs, "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8081"


def test_core_node_webhook_is_served_behind_a_service_with_the_chart_made_certificate() -> None:
    docs = render()
    (configuration,) = of_kind(docs, "MutatingWebhookConfiguration")
    webhook, _jobs = configuration["webhooks"]  # the Jobs one: test_deferrable_admission.py
    client_config = webhook.pop("clientConfig")
    # The same webhook the operator writes itself when it runs outside the cluster.
    expected = registration.mutating_webhook_configuration(
        "lo-core-nodes", {}, timeout_seconds=5, jobs_client_config={}
    )["webhooks"][0]
    expected.pop("clientConfig")
    assert webhook == expected
    assert webhook["failurePolicy"] == "Ignore", "it never keeps a kubelet from registering"
    assert client_config["service"] == {
        "name": "lo-webhook",
        "namespace": "lightsout-system",
        "path": f"/{admission.WEBHOOK_ID}",
        "port": 443,
    }
    (service,) = [d for d in of_kind(docs, "Service") if d["metadata"]["name"] == "lo-webhook"]
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook"}]
    (secret,) = of_kind(docs, "Secret")
    assert secret["data"]["ca.crt"] == client_config["caBundle"]
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LIGHTSOUT_WEBHOOK_ADDRESS"] == "0.0.0.0:8443"
    assert "LIGHTSOUT_WEBHOOK_URL" not in env, "the chart owns the configuration"
    assert {"name": "webhook", "containerPort": 8443} in container["ports"]
    assert {"name": "webhook-tls", "secret": {"secretName": "lo-webhook-tls"}} in pod["volumes"]

    off = render("webhook.enabled=false")
    assert not of_kind(off, "MutatingWebhookConfiguration") and not of_kind(off, "Secret")
    (container,) = of_kind(off, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    assert not [e for e in container["env"] if e["name"].startswith("LIGHTSOUT_WEBHOOK")]


def test_group_webhook_is_the_one_the_operator_writes_limited_to_the_watched_namespaces() -> None:
    (configuration,) = of_kind(render(), "ValidatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    client_config = webhook.pop("clientConfig")
    expected = registration.validating_webhook_configuration("lo-groups", {}, timeout_seconds=5)
    (expected_webhook,) = expected["webhooks"]
    expected_webhook.pop("clientConfig")
    assert webhook == expected_webhook
    assert client_config["service"]["path"] == f"/{admission.GROUPS_WEBHOOK_ID}"

    scoped = render("watchNamespaces={home,lab}")
    (webhook,) = of_kind(scoped, "ValidatingWebhookConfiguration")[0]["webhooks"]
    webhook.pop("clientConfig")
    expected = registration.validating_webhook_configuration(
        "lo-groups", {}, timeout_seconds=5, namespaces=("lab", "home")
    )
    (expected_webhook,) = expected["webhooks"]
    expected_webhook.pop("clientConfig")
    assert webhook == expected_webhook
    assert not of_kind(render("webhook.enabled=false"), "ValidatingWebhookConfiguration")


def test_the_cluster_autoscaler_deployment_runs_readmes_flags() -> None:
    """deploy/cluster-autoscaler's Deployment passes every flag of README's block (the one the
    end-to-end tests run), so the shipped expander is the documented one."""
    path = Path(__file__).resolve().parents[2] / "deploy/cluster-autoscaler/cluster-autoscaler.yaml"
    (deployment,) = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    missing = [f for f in readme_flags() if f not in container["args"]]
    assert missing == [], missing
