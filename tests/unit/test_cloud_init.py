"""The cloud-init user-data and network-config per join flavor, as playbooks/tasks/cloud_init.yml
renders them (real Ansible, no Proxmox: a small playbook includes the task file and writes the
files it built). The kubeadm flavor is also proven end to end by tests/e2e/test_proxmox_join.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "playbooks" / "tasks" / "cloud_init.yml"
TOKEN = "abcdef.0123456789abcdef"
K3S_TOKEN = "K10deadbeef::server:s3cr3t"
TEMPLATE = """#cloud-config
hostname: {{ lightsout_join.hostname }}
runcmd:
  - [my-join, --server, "https://{{ lightsout_join_server }}", --token-file, /run/t]
write_files:
  - path: /run/t
    content: "{{ lightsout_join_token }}"
  - path: /etc/labels
    content: '{{ lightsout_join.labels | to_json }}'
"""


FLAVORS = ("kubeadm", "k3s", "template")
STATIC = {"address": "10.77.0.10/24", "gateway": "10.77.0.1", "dns_servers": ["10.77.0.2"]}


def _play(tmp_path: Path, flavor: str) -> dict[str, Any]:
    """A play running the task file for `flavor` (k3s with a static address) and writing the
    files it built to out/<flavor>/."""
    join_dir, out = tmp_path / flavor / "join", tmp_path / flavor / "out"
    join_dir.mkdir(parents=True)
    out.mkdir()
    (join_dir / "ca.crt").write_text(
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    )
    (join_dir / "server").write_text("10.0.0.10:6443")
    if flavor == "k3s":
        (join_dir / "k3s-token").write_text(K3S_TOKEN)
    else:
        (join_dir / "token").write_text(TOKEN)
    if flavor == "template":
        (join_dir / "user-data.j2").write_text(TEMPLATE)
    join = {
        "flavor": flavor,
        "hostname": "clone-1",
        "labels": {"workload": "burst", "zone": "a"},
        "taints": [
            {"key": "burst", "value": "true", "effect": "NoSchedule"},
            {"key": "gpu", "effect": "NoExecute"},
        ],
        "iso_storage": "local",
        "ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nz lab@test"],
        **({"network": STATIC} if flavor == "k3s" else {}),
    }
    return {
        "name": flavor,
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "lightsout_join": join,
            "lightsout_join_dir": str(join_dir),
            "proxmox_vm_machine_tag": "lightsout-node.ns.clone-1",
            "out": str(out),
        },
        "tasks": [
            {"ansible.builtin.include_tasks": str(TASKS)},
            {
                "ansible.builtin.copy": {
                    "dest": "{{ out }}/{{ item.key }}",
                    "content": "{{ item.value }}",
                    "mode": "0600",
                },
                "loop": "{{ proxmox_vm_cloud_init_files | dict2items }}",
                "no_log": True,
            },
        ],
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One ansible-playbook run rendering every flavor: flavor -> the files it built."""
    tmp_path = tmp_path_factory.mktemp("cloud-init")
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([_play(tmp_path, flavor) for flavor in FLAVORS]))
    ran = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_NOCOLOR": "1"},
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # The tokens are no_log: not in Ansible's output.
    assert TOKEN not in ran.stdout and K3S_TOKEN not in ran.stdout
    out = {}
    for flavor in FLAVORS:
        files = tmp_path / flavor / "out"
        out[flavor] = {
            "user_text": (files / "user-data").read_text(),
            "user": yaml.safe_load((files / "user-data").read_text()),
            "meta": yaml.safe_load((files / "meta-data").read_text()),
            "network": yaml.safe_load((files / "network-config").read_text()),
        }
    return out


def files_of(user_data: dict[str, Any]) -> dict[str, Any]:
    return {f["path"]: yaml.safe_load(f["content"]) for f in user_data.get("write_files", [])}


def test_kubeadm_joins_with_the_bootstrap_token_over_dhcp(rendered: dict[str, Any]) -> None:
    got = rendered["kubeadm"]
    assert got["user_text"].startswith("#cloud-config\n")
    user = got["user"]
    assert user["hostname"] == "clone-1"
    assert user["ssh_authorized_keys"] == ["ssh-ed25519 AAAAC3Nz lab@test"]
    assert user["runcmd"] == [["kubeadm", "join", "--config", "/etc/kubernetes/kubeadm-join.yaml"]]
    config = files_of(user)["/etc/kubernetes/kubeadm-join.yaml"]
    assert config["kind"] == "JoinConfiguration"
    assert config["discovery"]["tlsBootstrapToken"] == TOKEN
    registration = config["nodeRegistration"]
    assert registration["kubeletExtraArgs"] == [
        {"name": "node-labels", "value": "workload=burst,zone=a"}
    ]
    assert registration["taints"][1] == {"key": "gpu", "effect": "NoExecute"}
    discovery = files_of(user)["/etc/kubernetes/discovery.conf"]
    assert discovery["clusters"][0]["cluster"]["server"] == "https://10.0.0.10:6443"
    assert got["meta"] == {"instance-id": "lightsout-node.ns.clone-1", "local-hostname": "clone-1"}
    assert got["network"]["ethernets"]["primary"] == {"match": {"name": "e*"}, "dhcp4": True}


def test_k3s_agent_joins_with_the_users_token_from_its_config_file(
    rendered: dict[str, Any],
) -> None:
    got = rendered["k3s"]
    assert got["user_text"].startswith("#cloud-config\n")
    user = got["user"]
    assert user["hostname"] == "clone-1"
    config = files_of(user)["/etc/rancher/k3s/config.yaml"]
    assert config == {
        "server": "https://10.0.0.10:6443",
        "token": K3S_TOKEN,
        "node-name": "clone-1",
        "node-label": ["workload=burst", "zone=a"],
        "node-taint": ["burst=true:NoSchedule", "gpu:NoExecute"],
    }
    # The agent install; the token only in the 0600 config file, on no command line.
    assert user["runcmd"] == [
        ["sh", "-c", "curl -sfL https://get.k3s.io | INSTALL_K3S_EXEC=agent sh -"]
    ]
    assert K3S_TOKEN not in json.dumps(user["runcmd"])
    assert "kubeadm" not in got["user_text"]
    assert got["network"]["ethernets"]["primary"] == {
        "match": {"name": "e*"},
        "dhcp4": False,
        "addresses": ["10.77.0.10/24"],
        "routes": [{"to": "default", "via": "10.77.0.1"}],
        "nameservers": {"addresses": ["10.77.0.2"]},
    }


def test_template_is_the_users_user_data_rendered(rendered: dict[str, Any]) -> None:
    got = rendered["template"]
    assert got["user_text"].startswith("#cloud-config\n")
    user = got["user"]
    assert user["hostname"] == "clone-1"
    assert user["runcmd"] == [
        ["my-join", "--server", "https://10.0.0.10:6443", "--token-file", "/run/t"]
    ]
    written = {f["path"]: f["content"] for f in user["write_files"]}
    assert written["/run/t"] == TOKEN
    assert json.loads(written["/etc/labels"]) == {"workload": "burst", "zone": "a"}
