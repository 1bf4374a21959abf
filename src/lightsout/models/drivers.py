"""The `spec.driver` block of a Node: how one machine is powered on and off.

Exactly one driver is set per Node. Each driver's fields become the extravars of the action
playbooks (see playbooks/README.md); credentials are only ever referenced by Secret name and key,
never inlined, because the Secret is mounted into the action Job rather than passed through the
operator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field, StringConstraints, create_model

from lightsout.models.base import ApiModel, Rule, RuleReason, default_empty
from lightsout.models.common import CredentialsSecretRef, SecretKeyRef, TLSConfig
from lightsout.models.enums import Action, BootOverride, JoinFlavor, ProxmoxMode
from lightsout.models.types import (
    DnsSubdomain,
    Host,
    HttpsUrl,
    HttpUrl,
    IPv4,
    MacAddress,
    Port,
    SecretKey,
    Watts,
)


class RedfishDriver(ApiModel):
    """Power through a BMC's Redfish API (iDRAC, iLO, XClarity, OpenBMC, sushy-tools)."""

    endpoint: HttpsUrl
    """Base URL of the BMC, e.g. https://10.0.0.21; the service root is `<endpoint>/redfish/v1`."""
    system_id: Annotated[
        str,
        StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.:]*$"),
    ]
    """Id of the ComputerSystem under /redfish/v1/Systems: a UUID on sushy-tools and libvirt,
    `System.Embedded.1` on iDRAC, `1` on iLO."""
    credentials_secret_ref: CredentialsSecretRef
    """Secret with the BMC user name and password."""
    tls: TLSConfig = default_empty(TLSConfig)
    """Certificate checking for the BMC."""
    boot_override: BootOverride = BootOverride.NONE
    """One-shot boot device set before power-on; `Pxe` network-boots (re)installable machines."""
    graceful_shutdown_seconds: int = Field(default=120, ge=0, le=3600)
    """How long to wait after a graceful shutdown request before forcing the power off."""


class IPMIDriver(ApiModel):
    """Power through IPMI-over-LAN (lanplus), for BMCs without Redfish."""

    host: Host
    """BMC host name or IP address."""
    port: Port = 623
    """BMC UDP port."""
    credentials_secret_ref: CredentialsSecretRef
    """Secret with the BMC user name and password."""
    cipher_suite: Literal[3, 17] = 3
    """IPMI 2.0 cipher suite id: 3 (AES-128, HMAC-SHA1) is what most BMCs accept, 17 adds
    SHA-256; the IPMI client the playbooks use (pyghmi) speaks no other."""
    boot_override: BootOverride = BootOverride.NONE
    """One-shot boot device set before power-on."""


class SSHKeySecretRef(SecretKeyRef):
    """A Secret key holding an OpenSSH private key."""

    key: SecretKey = "ssh-privatekey"
    """Key within the Secret (the key of a kubernetes.io/ssh-auth Secret by default)."""


class SSHShutdown(ApiModel):
    """How a Wake-on-LAN machine is shut down: a command run over SSH."""

    host: Host
    """Host name or IP address to SSH to."""
    port: Port = 22
    """SSH port."""
    user: Annotated[
        str, StringConstraints(min_length=1, max_length=32, pattern=r"^[a-z_][-a-z0-9_.]*\$?$")
    ]
    """Login user; it must be allowed to run `shutdownCommand`."""
    private_key_secret_ref: SSHKeySecretRef
    """Secret with the private key to log in with."""
    known_hosts: Annotated[str, StringConstraints(max_length=16384)] | None = None
    """known_hosts lines for the host; when omitted the host key is not verified."""
    shutdown_command: Annotated[str, StringConstraints(min_length=1, max_length=1024)] = (
        "sudo systemctl poweroff"
    )
    """Command that powers the machine off."""


class Probe(ApiModel):
    """A TCP port that answers only while the machine is up, to observe its power state."""

    host: Host
    """Host name or IP address to probe."""
    port: Port = 22
    """TCP port to probe."""


class WoLDriver(ApiModel):
    """Power on with a Wake-on-LAN magic packet, power off over SSH (mini PCs, desktops)."""

    mac_address: MacAddress
    """MAC address of the network card that wakes the machine."""
    broadcast_address: IPv4 = "255.255.255.255"
    """Where the magic packet is sent: the machine's subnet broadcast address."""
    port: Port = 9
    """UDP port of the magic packet."""
    ssh: SSHShutdown
    """How the machine is shut down."""
    probe: Probe | None = None
    """How the power state is observed; by default the SSH host and port."""


class PlugWakeOnLan(ApiModel):
    """A Wake-on-LAN packet after the plug is switched on, for a machine whose firmware does
    not boot when its power comes back."""

    mac_address: MacAddress
    """MAC address of the network card that wakes the machine."""
    broadcast_address: IPv4 = "255.255.255.255"
    """Where the magic packet is sent: the machine's subnet broadcast address."""
    port: Port = 9
    """UDP port of the magic packet."""
    delay_seconds: int = Field(default=10, ge=0, le=600)
    """Seconds between switching the plug on and the packet: the time the machine's standby
    power needs to come up."""


class PlugDriver(ApiModel):
    """What the smart-plug drivers share: the plug only cuts or gives power, so it is switched
    off only on positive evidence that the OS went down. With a meter: a draw under
    `offWattsThreshold` (after the shutdown command over SSH while the OS answered). Without
    one: the shutdown command was delivered over SSH, then the probe went silent, then the
    machine's kubelet stopped renewing its Lease in kube-node-lease. A silent probe alone is no
    evidence."""

    ssh: SSHShutdown
    """How the OS is shut down before the plug is switched off."""
    probe: Probe | None = None
    """How to tell the OS is up; by default the SSH host and port."""
    wake_on_lan: PlugWakeOnLan | None = None
    """Send a magic packet after switching on (firmware without "power on after AC loss")."""
    off_watts_threshold: Watts | None = None
    """The draw under which the machine counts as off, so the plug may be switched off. Unset:
    halfway between the off draw (else 0) and the idle draw, each as learned from the plug's
    readings (`status.learned`), else as declared in `power`; else 5 W. Ignored for a
    plug without a power meter (a Home Assistant switch without `powerSensorEntity`)."""
    force: bool = False
    """When nothing shows the OS went down (it still answers, the draw stays high, its kubelet
    still renews its Lease, or no shutdown command could be delivered): true switches the plug
    off anyway, `power.shutdownTimeoutSeconds` after the shutdown was asked for (a Warning event
    ForcedPowerOff), false (default) leaves it on and the power-off fails saying which evidence
    is missing."""


class ShellyDriver(PlugDriver):
    """A Shelly Gen2+ plug or relay (Plus, Pro, Gen3), driven by its RPC over HTTP."""

    endpoint: HttpUrl
    """Base URL of the device, e.g. http://192.0.2.40 (`<endpoint>/rpc/Switch.Set`)."""
    switch_id: int = Field(default=0, ge=0, le=15)
    """Id of the switch component (0 on a plug)."""


class TasmotaDriver(PlugDriver):
    """A plug running Tasmota, driven by its HTTP commands (`/cm?cmnd=Power1 On`)."""

    endpoint: HttpUrl
    """Base URL of the device, e.g. http://192.0.2.41."""
    relay: int = Field(default=1, ge=1, le=32)
    """Relay number (`Power<relay>`; 1 on a plug)."""


class TokenSecretRef(SecretKeyRef):
    """A Secret key holding a Home Assistant long-lived access token."""

    key: SecretKey = "token"
    """Key within the Secret."""


HA_ONE_SECRET = Rule(
    cel="self.tokenSecretRef.name == self.ssh.privateKeySecretRef.name",
    message="tokenSecretRef must name the Secret of ssh.privateKeySecretRef: the action Job"
    " mounts one credentials Secret, holding both the token and the SSH key",
    field_path=".tokenSecretRef.name",
    test=lambda ha: ha.token_secret_ref.name == ha.ssh.private_key_secret_ref.name,
)
SwitchEntity = Annotated[
    str, StringConstraints(min_length=8, max_length=255, pattern=r"^switch\.[a-z0-9_]+$")
]
SensorEntity = Annotated[
    str, StringConstraints(min_length=8, max_length=255, pattern=r"^sensor\.[a-z0-9_]+$")
]


class HomeAssistantDriver(PlugDriver):
    """A switch entity of Home Assistant, driven by its REST API with a long-lived token."""

    cel_rules = (HA_ONE_SECRET,)

    endpoint: HttpUrl
    """Base URL of Home Assistant, e.g. http://homeassistant.local:8123."""
    token_secret_ref: TokenSecretRef
    """Secret key with a long-lived access token (the same Secret as the SSH key)."""
    switch_entity: SwitchEntity
    """The switch entity powering the machine, e.g. `switch.rack_plug`."""
    power_sensor_entity: SensorEntity | None = None
    """A sensor entity measuring the plug's draw in W, e.g. `sensor.rack_plug_power`. Without
    it nothing measures that the machine is off: the switch is turned off only after a shutdown
    command was delivered over SSH, the probe went silent and the kubelet stopped renewing its
    Lease; a machine whose SSH does not answer keeps its power (unless `force`)."""


TOKEN_KEYS_PAIRED = Rule(
    cel="has(self.tokenIdKey) == has(self.tokenSecretKey)",
    message="tokenIdKey and tokenSecretKey must be set together",
    field_path=".tokenSecretKey",
    test=lambda ref: (ref.token_id_key is None) == (ref.token_secret_key is None),
)


class ProxmoxCredentialsRef(CredentialsSecretRef):
    """A Secret with a Proxmox VE user and password, or an API token when its keys are named."""

    cel_rules = (TOKEN_KEYS_PAIRED,)

    token_id_key: SecretKey | None = None
    """Key holding an API token id (`user@pam!name`); when set, the token is used instead of
    the password."""
    token_secret_key: SecretKey | None = None
    """Key holding the API token secret."""


Vmid = Annotated[int, Field(ge=100, le=999_999_999)]
PveName = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$"
    ),
]
PveTag = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9_][-a-z0-9_+.]*$")
]

VMID_RANGE_ORDER = Rule(
    cel="self.lower <= self.upper",
    message="vmidRange.lower must be less than or equal to vmidRange.upper",
    field_path=".lower",
    test=lambda vmids: vmids.lower <= vmids.upper,
)


class VmidRange(ApiModel):
    """An inclusive range of VM ids Lights-Out may use for clones."""

    cel_rules = (VMID_RANGE_ORDER,)

    lower: Vmid
    """Lowest VM id."""
    upper: Vmid
    """Highest VM id."""


class ProxmoxTemplate(ApiModel):
    """The template an Ephemeral VM is cloned from."""

    vmid: Vmid
    """VM id of the template."""


PveStorage = Annotated[
    str,
    StringConstraints(min_length=2, max_length=63, pattern=r"^[A-Za-z][-A-Za-z0-9_.]*[A-Za-z0-9]$"),
]
#: One OpenSSH public key line (`ssh-ed25519 AAAA... comment`).
SshPublicKey = Annotated[
    str,
    StringConstraints(
        min_length=16,
        max_length=4096,
        pattern=r"^(ssh-|ecdsa-|sk-)[-a-z0-9@.]+ [A-Za-z0-9+/=]+( .*)?$",
    ),
]


class UserDataTemplateRef(ApiModel):
    """A key of a ConfigMap in the Node's namespace holding a cloud-init user-data template."""

    name: DnsSubdomain
    """Name of the ConfigMap."""
    key: SecretKey = "user-data"
    """Key holding the template."""


K3S_NEEDS_TOKEN = Rule(
    cel="(has(self.flavor) && self.flavor == 'k3s') == has(self.k3sTokenSecretRef)",
    message="flavor k3s takes the agent token from k3sTokenSecretRef, which only k3s uses",
    field_path=".k3sTokenSecretRef",
    test=lambda join: (join.flavor is JoinFlavor.K3S) == (join.k3s_token_secret_ref is not None),
)
TEMPLATE_NEEDS_REF = Rule(
    cel="(has(self.flavor) && self.flavor == 'template') == has(self.userDataTemplateRef)",
    message="flavor template renders userDataTemplateRef, which only that flavor uses",
    field_path=".userDataTemplateRef",
    test=lambda join: (
        (join.flavor is JoinFlavor.TEMPLATE) == (join.user_data_template_ref is not None)
    ),
)


class CloudInitJoin(ApiModel):
    """How an Ephemeral clone joins the cluster by itself on first boot.

    On each provision the provision Job writes a cloud-init NoCloud ISO with the clone's
    hostname, its join step, the Node's labels and taints, these SSH keys and its network
    (DHCP, or an address from the Group's addressPool); it is uploaded to `isoStorage` and
    attached as the clone's CD-ROM, and goes with the clone on deprovision. Flavor kubeadm
    (and template) gets a kubeadm bootstrap token the operator issues per provision (a
    `bootstrap.kubernetes.io/token` Secret in kube-system, expiring after the provision and
    boot timeouts, deleted once the machine is Ready or provisioning failed); flavor k3s the
    agent token of `k3sTokenSecretRef`. Tokens never appear in the Node, events or logs.
    """

    cel_rules = (K3S_NEEDS_TOKEN, TEMPLATE_NEEDS_REF)

    api_server_endpoint: Annotated[
        str,
        StringConstraints(
            min_length=3,
            max_length=253,
            pattern=r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5}$",
        ),
    ]
    """`host:port` of the Kubernetes API server as the clone reaches it (kubeadm's
    `apiServerEndpoint`), e.g. `10.0.0.10:6443`."""
    iso_storage: PveStorage = "local"
    """Proxmox storage that accepts ISO images (content type `iso`), where the NoCloud ISO goes."""
    ssh_authorized_keys: list[SshPublicKey] | None = Field(default=None, max_length=16)
    """Public keys allowed to log in to the clone's default user."""
    flavor: JoinFlavor = JoinFlavor.KUBEADM
    """kubeadm: `kubeadm join` with a bootstrap token. k3s: the k3s agent installed and joined
    with the token of `k3sTokenSecretRef` (server `https://<apiServerEndpoint>`). template:
    the user-data is `userDataTemplateRef` rendered by Ansible (Jinja2) with `lightsout_join`
    (hostname, labels, taints, ssh_authorized_keys, network), `lightsout_join_token` (a
    bootstrap token), `lightsout_join_ca` and `lightsout_join_server`."""
    k3s_token_secret_ref: SecretKeyRef | None = Field(default=None, alias="k3sTokenSecretRef")
    """flavor k3s: the Secret key holding the k3s agent (or node) token."""
    user_data_template_ref: UserDataTemplateRef | None = None
    """flavor template: the ConfigMap key holding the user-data template."""


PERSISTENT_NEEDS_VMID = Rule(
    cel="self.mode != 'Persistent' || has(self.vmid)",
    message="mode Persistent needs vmid, the VM to start and stop",
    field_path=".vmid",
    reason=RuleReason.REQUIRED,
    test=lambda pve: pve.mode is not ProxmoxMode.PERSISTENT or pve.vmid is not None,
)
EPHEMERAL_NEEDS_TEMPLATE = Rule(
    cel="self.mode != 'Ephemeral' || has(self.template)",
    message="mode Ephemeral needs template.vmid, the template to clone",
    field_path=".template",
    reason=RuleReason.REQUIRED,
    test=lambda pve: pve.mode is not ProxmoxMode.EPHEMERAL or pve.template is not None,
)
JOIN_NEEDS_EPHEMERAL = Rule(
    cel="!has(self.join) || self.mode == 'Ephemeral'",
    message="join applies to Ephemeral clones only: a Persistent VM is already installed",
    field_path=".join",
    reason=RuleReason.FORBIDDEN,
    test=lambda pve: pve.join is None or pve.mode is ProxmoxMode.EPHEMERAL,
)
PROXMOX_MODE_IMMUTABLE = Rule(
    cel="self.mode == oldSelf.mode",
    message=(
        "mode cannot change: Ephemeral VMs are created and destroyed by Lights-Out, Persistent"
        " ones belong to you; delete the Node and create it again"
    ),
    field_path=".mode",
)


class ProxmoxDriver(ApiModel):
    """Power a Proxmox VE virtual machine: start/stop one VM, or clone and destroy one."""

    cel_rules = (
        PERSISTENT_NEEDS_VMID,
        EPHEMERAL_NEEDS_TEMPLATE,
        JOIN_NEEDS_EPHEMERAL,
        PROXMOX_MODE_IMMUTABLE,
    )

    endpoint: HttpsUrl
    """Proxmox VE API URL, e.g. https://pve.example:8006."""
    node: PveName
    """Proxmox VE host (cluster node) the VM lives on or is cloned on."""
    credentials_secret_ref: ProxmoxCredentialsRef
    """Secret with the API user and password, or an API token."""
    tls: TLSConfig = default_empty(TLSConfig)
    """Certificate checking for the API."""
    mode: ProxmoxMode = ProxmoxMode.PERSISTENT
    """Persistent: start and stop `vmid`. Ephemeral: clone `template` on power-on, destroy the
    clone on power-off."""
    vmid: Vmid | None = None
    """The VM (Persistent), or a fixed id for the clone (Ephemeral; else taken from vmidRange)."""
    template: ProxmoxTemplate | None = None
    """Template to clone (Ephemeral)."""
    vmid_range: VmidRange | None = None
    """Ids a clone may take (Ephemeral); the lowest free one is used."""
    allowed_hosts: list[PveName] | None = Field(
        default=None, max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    """Proxmox VE hosts a clone may be placed on (Ephemeral); by default only `node`."""
    cores: int | None = Field(default=None, ge=1, le=1024)
    """CPU cores of the clone (Ephemeral); by default the template's."""
    memory_mib: int | None = Field(default=None, ge=16, le=16_777_216, alias="memoryMiB")
    """Memory of the clone in MiB (Ephemeral); by default the template's."""
    tags: list[PveTag] | None = Field(
        default=None, max_length=16, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    """Proxmox tags put on the VM, to recognise machines Lights-Out manages."""
    join: CloudInitJoin | None = None
    """Ephemeral: give each clone a cloud-init ISO with its join step and short-lived
    credentials, so it joins the cluster by itself (without it the template must know how)."""


@dataclass(frozen=True)
class SecretNeed:
    """One Secret a driver block names and the keys its role reads from it."""

    what: str
    name: str
    keys: tuple[str, ...]
    field: str
    """Where the block names it, e.g. `credentialsSecretRef` (for messages)."""


def _ref(block: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    for key in path:
        value = block.get(key) if isinstance(block, Mapping) else None
        block = value if isinstance(value, Mapping) else {}
    return block


def credentials_secret(block: Mapping[str, Any]) -> list[SecretNeed]:
    """`credentialsSecretRef`: username and password keys, or a Proxmox API token's two keys."""
    ref = _ref(block, "credentialsSecretRef")
    if not ref.get("name"):
        return []
    if ref.get("tokenIdKey") and ref.get("tokenSecretKey"):
        keys = (str(ref["tokenIdKey"]), str(ref["tokenSecretKey"]))
    else:
        keys = (str(ref.get("usernameKey", "username")), str(ref.get("passwordKey", "password")))
    return [SecretNeed("credentials Secret", str(ref["name"]), keys, "credentialsSecretRef")]


def ssh_secret(block: Mapping[str, Any]) -> list[SecretNeed]:
    """`ssh.privateKeySecretRef` (and Home Assistant's token, which must be in the same Secret)."""
    ref = _ref(block, "ssh", "privateKeySecretRef")
    if not ref.get("name"):
        return []
    keys: tuple[str, ...] = (str(ref.get("key", "ssh-privatekey")),)
    token = _ref(block, "tokenSecretRef")
    if token.get("name"):
        keys += (str(token.get("key", "token")),)
    return [SecretNeed("SSH key Secret", str(ref["name"]), keys, "ssh.privateKeySecretRef")]


def _always(_block: Any) -> bool:
    return True


def _never(_block: Any) -> bool:
    return False


_POWER = frozenset({Action.STARTUP, Action.SHUTDOWN, Action.HEALTHCHECK})


@dataclass(frozen=True)
class Driver:
    """Everything Lights-Out knows of one driver, in one place (the registry `DRIVERS`).

    The Node's `spec.driver` block, its CRD schema and docs, the Secrets checked before a Job
    starts (`state/references.py`), the runner's role map (`playbooks/vars/drivers.yml`,
    written by `make crds`) and the checks of tests/unit/test_driver_registry.py (the
    role exists with its argument specs, the lab emulates it) are all derived from this entry.
    """

    kind: str
    """The block's name under `spec.driver` and the playbooks' `lightsout_driver`."""
    model: type[ApiModel]
    """The block's model."""
    description: str
    """The block's description in the CRD."""
    role: str
    """The Ansible role that drives it (`roles/<role>`)."""
    secrets: Callable[[Mapping[str, Any]], list[SecretNeed]]
    """The Secrets a block (camelCase, as stored) names, with the keys the role reads."""
    actions: frozenset[Action] = _POWER
    """The actions it runs: startup, shutdown and healthcheck, plus provision and deprovision
    for drivers that make and destroy machines."""
    graceful: bool = True
    """Whether it shuts the OS down by a path of its own before the power goes (ACPI soft-off,
    a guest shutdown, the OS itself over SSH). False: it cuts the power, so it may do that only
    on evidence that the OS went down, or when `force` says so."""
    metered: Callable[[Any], bool] = _never
    """Whether the hardware behind a block (typed) measures the machine's draw."""
    inspects: bool = False
    """Whether its health check reports what the machine is (cpu, memory, architecture, GPUs:
    the role sets `<role>_inspected`), which `status.inspected` keeps and the planner uses."""
    password_files: bool = False
    """Whether the role reads `username` and `password` files from the credentials Secret."""
    confirms_off: bool = False
    """Whether its power-off ends on a reading of the power state (the controller polled until
    it says Off, else the run fails): the shutdown playbook then reads nothing back after it."""

    @property
    def ephemeral(self) -> bool:
        """Whether it makes and destroys machines (provision and deprovision)."""
        return Action.PROVISION in self.actions


def _ha_metered(block: Any) -> bool:
    return isinstance(block, HomeAssistantDriver) and block.power_sensor_entity is not None


#: Every driver, in the order the CRD lists them. Adding one: its block's model above, an
#: entry here, a role, and an emulator in the lab (playbooks/README.md, "Adding a driver").
DRIVERS: tuple[Driver, ...] = (
    Driver(
        "redfish",
        RedfishDriver,
        "A BMC speaking Redfish.",
        "redfish_power",
        credentials_secret,
        metered=_always,
        inspects=True,
        password_files=True,
        confirms_off=True,
    ),
    Driver(
        "ipmi",
        IPMIDriver,
        "A BMC speaking IPMI-over-LAN.",
        "ipmi_power",
        credentials_secret,
        password_files=True,
        confirms_off=True,
    ),
    Driver("wol", WoLDriver, "Wake-on-LAN to power on, SSH to power off.", "wol", ssh_secret),
    Driver(
        "proxmox",
        ProxmoxDriver,
        "A Proxmox VE virtual machine.",
        "proxmox_vm",
        credentials_secret,
        actions=_POWER | {Action.PROVISION, Action.DEPROVISION},
        inspects=True,
    ),
    Driver(
        "shelly",
        ShellyDriver,
        "A Shelly Gen2+ smart plug, with an OS shutdown over SSH.",
        "plug_power",
        ssh_secret,
        graceful=False,
        metered=_always,
    ),
    Driver(
        "tasmota",
        TasmotaDriver,
        "A Tasmota smart plug, with an OS shutdown over SSH.",
        "plug_power",
        ssh_secret,
        graceful=False,
        metered=_always,
    ),
    Driver(
        "homeassistant",
        HomeAssistantDriver,
        "A Home Assistant switch entity, with an OS shutdown over SSH.",
        "plug_power",
        ssh_secret,
        graceful=False,
        metered=_ha_metered,
    ),
)
#: kind -> its entry.
REGISTRY: Mapping[str, Driver] = {driver.kind: driver for driver in DRIVERS}
#: The driver names, in the registry's order.
DRIVER_KINDS: tuple[str, ...] = tuple(REGISTRY)


def _one_of() -> str:
    return ", ".join(DRIVER_KINDS[:-1]) + f" or {DRIVER_KINDS[-1]}"


ONE_DRIVER = Rule(
    cel=" + ".join(f"(has(self.{kind}) ? 1 : 0)" for kind in DRIVER_KINDS) + " == 1",
    message=f"exactly one of {_one_of()} must be set",
    test=lambda driver: len(driver.kinds()) == 1,
)
DRIVER_KIND_IMMUTABLE = Rule(
    cel=" && ".join(f"has(self.{kind}) == has(oldSelf.{kind})" for kind in DRIVER_KINDS),
    message="the driver kind cannot change (it would orphan the machine's running actions and"
    " clones); delete the Node and create it again",
)

_Block = TypeVar("_Block", bound=ApiModel)


class NodeDriverBase(ApiModel):
    """How the machine is powered: exactly one block, one per registered driver."""

    cel_rules = (ONE_DRIVER, DRIVER_KIND_IMMUTABLE)

    def kinds(self) -> list[str]:
        """The driver blocks that are set (exactly one, once validated)."""
        return [kind for kind in DRIVER_KINDS if getattr(self, kind, None) is not None]

    @property
    def kind(self) -> str:
        """Which driver block is set."""
        return self.kinds()[0]

    @property
    def entry(self) -> Driver:
        """The registry's entry of the driver that is set."""
        return REGISTRY[self.kind]

    @property
    def config(self) -> DriverBlock:
        """The one driver block that is set."""
        block: DriverBlock = getattr(self, self.kind)
        return block

    def block(self, model: type[_Block]) -> _Block | None:
        """The block that is set, when it is a `model` (e.g. `block(ProxmoxDriver)`)."""
        block = getattr(self, self.kind, None) if self.kinds() else None
        return block if isinstance(block, model) else None

    @property
    def plug(self) -> PlugDriver | None:
        """The block of a smart-plug driver (shelly, tasmota, homeassistant), if that is set."""
        return self.block(PlugDriver)

    @property
    def sends_magic_packets(self) -> bool:
        """Whether power-on broadcasts a Wake-on-LAN packet (its Job needs the host network)."""
        return self.block(WoLDriver) is not None or (
            self.plug is not None and self.plug.wake_on_lan is not None
        )


def _node_driver() -> type[NodeDriverBase]:
    fields: dict[str, Any] = {
        driver.kind: (driver.model | None, Field(default=None, description=driver.description))
        for driver in DRIVERS
    }
    model = create_model("NodeDriver", __base__=NodeDriverBase, __module__=__name__, **fields)
    model.__doc__ = (
        f"How the machine is powered: exactly one of {_one_of()}.\n\n"
        "Each block is one driver of the registry (`lightsout.models.drivers.DRIVERS`)."
    )
    return model


if TYPE_CHECKING:
    NodeDriver = NodeDriverBase
else:
    #: The `spec.driver` model: one optional block per registered driver.
    NodeDriver = _node_driver()


DriverBlock = RedfishDriver | IPMIDriver | WoLDriver | ProxmoxDriver | PlugDriver


__all__ = [
    "DRIVERS",
    "DRIVER_KINDS",
    "REGISTRY",
    "Driver",
    "DriverBlock",
    "HomeAssistantDriver",
    "IPMIDriver",
    "NodeDriver",
    "NodeDriverBase",
    "PlugDriver",
    "PlugWakeOnLan",
    "Probe",
    "ProxmoxCredentialsRef",
    "ProxmoxDriver",
    "ProxmoxTemplate",
    "RedfishDriver",
    "SSHKeySecretRef",
    "SSHShutdown",
    "SecretNeed",
    "ShellyDriver",
    "TasmotaDriver",
    "TokenSecretRef",
    "VmidRange",
    "WoLDriver",
]


def playbook_vars() -> dict[str, Any]:
    """What the playbooks know of the drivers, from the registry (`playbooks/vars/drivers.yml`,
    written by `make crds`): the role of each driver, the ones whose role reads username and
    password files, the ones that make and destroy machines, the ones whose power-off ends on a
    reading of the power state."""
    return {
        "lightsout_driver_roles": {driver.kind: driver.role for driver in DRIVERS},
        "lightsout_password_drivers": [d.kind for d in DRIVERS if d.password_files],
        "lightsout_ephemeral_drivers": [d.kind for d in DRIVERS if d.ephemeral],
        "lightsout_off_confirming_drivers": [d.kind for d in DRIVERS if d.confirms_off],
    }


#: The lines of playbooks/vars/drivers.yml between these are `playbook_vars()`, rewritten by
#: `make crds` (overlay playbooks load that one file, so the block lives there).
BEGIN_GENERATED = (
    "# BEGIN generated from lightsout.models.drivers.DRIVERS by `make crds`: do not edit"
)
END_GENERATED = "# END generated"


def with_playbook_vars(document: str) -> str:
    """drivers.yml's text with its generated block replaced by today's `playbook_vars()`."""
    import yaml  # only `make crds` and its drift test write the file: no import at load time

    head, begin, rest = document.partition(BEGIN_GENERATED)
    _, end, tail = rest.partition(END_GENERATED)
    if not begin or not end:
        raise ValueError(f"no block between {BEGIN_GENERATED!r} and {END_GENERATED!r}")
    body = yaml.safe_dump(playbook_vars(), sort_keys=False, default_flow_style=False)
    body = body.replace("\n- ", "\n  - ")  # yamllint's indentation of sequences
    return f"{head}{BEGIN_GENERATED}\n{body}{END_GENERATED}{tail}"


#: In a role's meta/argument_specs.yml, the comment above the `choices:` line of the option that
#: names which of its drivers a run is for (a role serving several drivers, e.g. plug_power's
#: `plug_power_kind`): `make crds` rewrites that line from the registry, so a new plug vendor is
#: an entry in the registry, not also a hand-edited list in the role.
KIND_CHOICES_MARKER = "# choices generated from lightsout.models.drivers.DRIVERS by `make crds`"


def role_kinds(role: str) -> list[str]:
    """The drivers, by kind, whose runs the role `role` drives, in the registry's order."""
    return [driver.kind for driver in DRIVERS if driver.role == role]


def with_kind_choices(document: str, role: str) -> str:
    """A role's argument_specs text with the `choices:` line under KIND_CHOICES_MARKER set to
    the role's drivers (unchanged when the role has no marker)."""
    lines = document.split("\n")
    for at, line in enumerate(lines[:-1]):
        if line.strip() == KIND_CHOICES_MARKER:
            following = lines[at + 1]
            indent = following[: len(following) - len(following.lstrip())]
            if not following.lstrip().startswith("choices:"):
                raise ValueError(f"the line after {KIND_CHOICES_MARKER!r} must be `choices:`")
            lines[at + 1] = f"{indent}choices: [{', '.join(role_kinds(role))}]"
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    # drivers.yml's block; with --roles DIR, each role's argument_specs too.
    target = Path(sys.argv[1])
    target.write_text(with_playbook_vars(target.read_text(encoding="utf-8")), encoding="utf-8")
    if sys.argv[2:3] == ["--roles"]:
        for specs in sorted(Path(sys.argv[3]).glob("*/meta/argument_specs.yml")):
            text = specs.read_text(encoding="utf-8")
            specs.write_text(with_kind_choices(text, specs.parents[1].name), encoding="utf-8")
