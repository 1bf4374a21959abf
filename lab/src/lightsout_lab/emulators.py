"""Which of the lab's emulators stands in for the hardware of each Lights-Out driver.

Every driver of the operator's registry (`lightsout.models.drivers.DRIVERS`) is proven end to
end against one of these; tests/unit/test_driver_registry.py fails when a driver is registered
without one. A driver that shuts its OS down over SSH also needs `SshMachine` (the OS side).
"""

from __future__ import annotations

from lightsout_lab.fakepve import FakePveCluster
from lightsout_lab.ipmi import IpmiSim
from lightsout_lab.plug_apis import HomeAssistant, ShellyPlug, TasmotaPlug
from lightsout_lab.sushy import SushyEmulator
from lightsout_lab.wol import WolListener

#: Driver kind -> the emulator class the e2e tests drive it against.
EMULATORS: dict[str, type] = {
    "redfish": SushyEmulator,
    "ipmi": IpmiSim,
    "wol": WolListener,
    "proxmox": FakePveCluster,
    ShellyPlug.source: ShellyPlug,
    TasmotaPlug.source: TasmotaPlug,
    HomeAssistant.source: HomeAssistant,
}
