"""A power meter and an inventory for the lab's Redfish BMC (sushy-tools' fake driver has neither).

Who uses it: `lightsout_lab.sushy` wraps sushy's WSGI app with `PowerMeterMiddleware` when a
`FakeSystem` carries a `PowerMeter`; the e2e and molecule tests of measured watts and
inspection read what it answers through the `redfish_power` role.

sushy-tools' fake driver answers a ComputerSystem without `ProcessorSummary.Count` or
`MemorySummary.TotalSystemMemoryGiB`, refuses `Processors` (FeatureNotAvailable) and has no
chassis `Power` resource. For a metered system this middleware, written from the Redfish
schemas (ComputerSystem, Processor, Chassis, Power, EnvironmentMetrics; DMTF DSP0268), adds:

- on `GET /redfish/v1/Systems/<id>` (sushy's own answer, amended): `ProcessorSummary`
  (`Count`, `CoreCount`, `LogicalProcessorCount`), `MemorySummary.TotalSystemMemoryGiB`, a
  `Processors` link, and `Links.Chassis` naming the meter's chassis;
- `GET /redfish/v1/Systems/<id>/Processors[/<n>]`: the CPU sockets (`ProcessorType` CPU,
  `ProcessorArchitecture`, `InstructionSet`, `TotalCores`, `TotalThreads`) and the GPUs
  (`ProcessorType` GPU);
- `GET /redfish/v1/Chassis/<meter id>` linking either `Power` (PowerControl[0].
  PowerConsumedWatts: the deprecated resource most BMCs answer) or `EnvironmentMetrics`
  (PowerWatts.Reading), as the meter's `resource` says, and that resource, whose reading
  follows the system's PowerState: `off_watts` while Off; while On `on_watts`, or, with an
  `idle_watts`, the draw of a machine whose cpu is `load` busy: idle + (on - idle) * load;
- with `pcie_gpus`, the chassis' `PCIeDevices` collection (PCIeDevice, PCIeFunction): the BMC's
  own video (ASPEED, a VGA-class display controller, as on most servers) and that many GPUs
  (NVIDIA 3D controllers) listed only there, not among the Processors, as many BMCs do.

The machine runs no workload, so nothing here knows its cpu load: a test that puts pods on it
writes the share of its cpu they keep busy to `load_file` (a number from 0 to 1; absent: idle),
standing in for the machine's own sensors.

Authentication stays sushy's: each answer of ours starts with an internal GET of the system
through the wrapped app carrying the client's own `Authorization`, and a refusal (401) is
passed on as it is.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MeterResource = Literal["Power", "EnvironmentMetrics"]

#: Setting in the emulator's config: uuid -> the meter's fields (`PowerMeter.to_config`).
POWER_METERS = "LIGHTSOUT_POWER_METERS"
_SYSTEMS = "/redfish/v1/Systems/"
_CHASSIS = "/redfish/v1/Chassis/"
_CHASSIS_PREFIX = "Meter-"


@dataclasses.dataclass(frozen=True)
class PowerMeter:
    """What a metered emulated system reports: its draw by power state and its inventory."""

    on_watts: float = 150.0
    off_watts: float = 6.0
    sockets: int = 1
    cores_per_socket: int = 4
    threads_per_core: int = 2
    memory_gib: float = 32
    #: Redfish's ProcessorArchitecture (x86, ARM) and InstructionSet (x86-64, ARM-A64).
    architecture: str = "x86"
    instruction_set: str = "x86-64"
    gpus: int = 0
    resource: MeterResource = "Power"
    #: The draw while On with no load; None: `on_watts` whatever the load.
    idle_watts: float | None = None
    #: Where a test writes the cpu share in use (0 to 1) while `idle_watts` is set.
    load_file: str | None = None
    #: GPUs listed only as PCIe devices (besides the BMC's own video); 0: no PCIeDevices.
    pcie_gpus: int = 0

    def to_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def load(self) -> float:
        """The cpu share in use the test wrote, clamped to 0..1; 0 when none was written."""
        try:
            with open(self.load_file or "", encoding="utf-8") as file:
                return min(max(float(file.read().strip()), 0.0), 1.0)
        except (OSError, ValueError):
            return 0.0

    def watts(self, power_state: str) -> float:
        if power_state == "Off":
            return self.off_watts
        if self.idle_watts is None:
            return self.on_watts
        return round(self.idle_watts + (self.on_watts - self.idle_watts) * self.load(), 1)


class PowerMeterMiddleware:
    """WSGI middleware adding the meter and inventory of the systems in `meters` (by uuid)."""

    def __init__(self, app: WSGIApp, meters: Mapping[str, Mapping[str, Any]]) -> None:
        self.app = app
        self.meters = {uuid: PowerMeter(**fields) for uuid, fields in meters.items()}

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", "")).rstrip("/")
        if environ.get("REQUEST_METHOD") != "GET":
            return self.app(environ, start_response)
        if path.startswith(_CHASSIS + _CHASSIS_PREFIX):
            rest = path[len(_CHASSIS + _CHASSIS_PREFIX) :].split("/")
            return self._answer(environ, start_response, rest[0], self._chassis, rest[1:])
        if path.startswith(_SYSTEMS):
            rest = path[len(_SYSTEMS) :].split("/")
            if len(rest) >= 2 and rest[1] == "Processors":
                return self._answer(environ, start_response, rest[0], self._processors, rest[2:])
            if len(rest) == 1:
                return self._amend_system(environ, start_response)
        return self.app(environ, start_response)

    # ------------------------------------------------------------------------ plumbing
    def _call(
        self, environ: dict[str, Any], path: str | None = None
    ) -> tuple[str, list[Any], bytes]:
        """The wrapped app's answer to this request (or a GET of `path` with its headers)."""
        if path is not None:
            environ = {
                **environ,
                "PATH_INFO": path,
                "REQUEST_METHOD": "GET",
                "QUERY_STRING": "",
                "CONTENT_LENGTH": "0",
                "wsgi.input": io.BytesIO(b""),
            }
        captured: list[Any] = []

        def capture(status: str, headers: list[Any], *_: Any) -> Callable[[bytes], None]:
            captured[:] = [status, headers]
            return lambda _data: None

        body = b"".join(self.app(environ, capture))
        return str(captured[0]), list(captured[1]), body

    @staticmethod
    def _send(
        start_response: Callable[..., Any], status: str, headers: list[Any], body: bytes
    ) -> list[bytes]:
        kept = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*kept, ("Content-Length", str(len(body)))])
        return [body]

    def _json(self, start_response: Callable[..., Any], doc: Mapping[str, Any]) -> list[bytes]:
        body = json.dumps(doc).encode()
        return self._send(start_response, "200 OK", [("Content-Type", "application/json")], body)

    def _answer(
        self,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
        ident: str,
        render: Callable[[str, PowerMeter, Mapping[str, Any], list[str]], Mapping[str, Any] | None],
        rest: list[str],
    ) -> Iterable[bytes]:
        status, headers, body = self._call(environ, _SYSTEMS + ident)
        if not status.startswith("200"):
            return self._send(start_response, status, headers, body)
        system = json.loads(body)
        uuid = str(system.get("UUID") or ident)
        meter = self.meters.get(uuid)
        doc = render(uuid, meter, system, rest) if meter is not None else None
        if doc is None:
            return self._send(start_response, "404 Not Found", [], b"")
        return self._json(start_response, doc)

    # ------------------------------------------------------------------------ resources
    def _amend_system(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        status, headers, body = self._call(environ)
        if not status.startswith("200"):
            return self._send(start_response, status, headers, body)
        system = json.loads(body)
        uuid = str(system.get("UUID") or "")
        meter = self.meters.get(uuid)
        if meter is None:
            return self._send(start_response, status, headers, body)
        cores = meter.sockets * meter.cores_per_socket
        system["ProcessorSummary"] = {
            **(system.get("ProcessorSummary") or {}),
            "Count": meter.sockets,
            "CoreCount": cores,
            "LogicalProcessorCount": cores * meter.threads_per_core,
        }
        system["MemorySummary"] = {
            **(system.get("MemorySummary") or {}),
            "TotalSystemMemoryGiB": meter.memory_gib,
        }
        system["Processors"] = {"@odata.id": f"{_SYSTEMS}{system['Id']}/Processors"}
        links = dict(system.get("Links") or {})
        links["Chassis"] = [{"@odata.id": f"{_CHASSIS}{_CHASSIS_PREFIX}{uuid}"}]
        system["Links"] = links
        return self._send(start_response, status, headers, json.dumps(system).encode())

    def _processors(
        self, _uuid: str, meter: PowerMeter, system: Mapping[str, Any], rest: list[str]
    ) -> Mapping[str, Any] | None:
        base = f"{_SYSTEMS}{system['Id']}/Processors"
        ids = [f"CPU{n}" for n in range(meter.sockets)] + [f"GPU{n}" for n in range(meter.gpus)]
        if not rest:
            return _collection(base, "Processor", "Processors Collection", ids)
        ident = rest[0]
        if len(rest) != 1 or ident not in ids:
            return None
        doc: dict[str, Any] = {
            "@odata.id": f"{base}/{ident}",
            "@odata.type": "#Processor.v1_18_0.Processor",
            "Id": ident,
            "Name": ident,
            "Status": {"State": "Enabled", "Health": "OK"},
        }
        if ident.startswith("CPU"):
            doc |= {
                "ProcessorType": "CPU",
                "ProcessorArchitecture": meter.architecture,
                "InstructionSet": meter.instruction_set,
                "TotalCores": meter.cores_per_socket,
                "TotalThreads": meter.cores_per_socket * meter.threads_per_core,
            }
        else:
            doc |= {"ProcessorType": "GPU", "Manufacturer": "Lab", "Model": "Emulated GPU"}
        return doc

    def _chassis(
        self, uuid: str, meter: PowerMeter, system: Mapping[str, Any], rest: list[str]
    ) -> Mapping[str, Any] | None:
        base = f"{_CHASSIS}{_CHASSIS_PREFIX}{uuid}"
        watts = meter.watts(str(system.get("PowerState")))
        if not rest:
            return {
                "@odata.id": base,
                "@odata.type": "#Chassis.v1_23_0.Chassis",
                "Id": f"{_CHASSIS_PREFIX}{uuid}",
                "Name": f"Chassis of {system.get('Name')}",
                "ChassisType": "RackMount",
                meter.resource: {"@odata.id": f"{base}/{meter.resource}"},
                "Links": {"ComputerSystems": [{"@odata.id": system["@odata.id"]}]},
            } | ({"PCIeDevices": {"@odata.id": f"{base}/PCIeDevices"}} if meter.pcie_gpus else {})
        if rest[0] == "PCIeDevices" and meter.pcie_gpus:
            return _pcie(base, meter.pcie_gpus, rest[1:])
        if rest != [meter.resource]:
            return None
        if meter.resource == "EnvironmentMetrics":
            return {
                "@odata.id": f"{base}/EnvironmentMetrics",
                "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
                "Id": "EnvironmentMetrics",
                "Name": "Chassis Environment Metrics",
                "PowerWatts": {"DataSourceUri": f"{base}/EnvironmentMetrics", "Reading": watts},
            }
        return {
            "@odata.id": f"{base}/Power",
            "@odata.type": "#Power.v1_7_1.Power",
            "Id": "Power",
            "Name": "Power",
            "PowerControl": [
                {
                    "@odata.id": f"{base}/Power#/PowerControl/0",
                    "MemberId": "0",
                    "Name": "System Power Control",
                    "PowerConsumedWatts": watts,
                }
            ],
        }


def _collection(odata_id: str, kind: str, name: str, members: list[str]) -> Mapping[str, Any]:
    """A Redfish collection of `kind` resources (`#<kind>Collection.<kind>Collection`)."""
    return {
        "@odata.id": odata_id,
        "@odata.type": f"#{kind}Collection.{kind}Collection",
        "Name": name,
        "Members@odata.count": len(members),
        "Members": [{"@odata.id": f"{odata_id}/{member}"} for member in members],
    }


#: (id, Manufacturer, Model, VendorId, DeviceId, ClassCode) of the BMC's own video and a GPU.
_BMC_VIDEO = ("BMCVideo", "ASPEED Technology, Inc.", "AST2600", "0x1a03", "0x2000", "0x030000")
_GPU = ("GPU{n}", "NVIDIA Corporation", "Emulated GPU", "0x10de", "0x20b5", "0x030200")


def _pcie(base: str, gpus: int, rest: list[str]) -> Mapping[str, Any] | None:
    """The chassis' PCIeDevices collection, a device, its PCIeFunctions or its one function."""
    devices = {_BMC_VIDEO[0]: _BMC_VIDEO}
    devices |= {_GPU[0].format(n=n): (_GPU[0].format(n=n), *_GPU[1:]) for n in range(gpus)}
    collection = f"{base}/PCIeDevices"
    if not rest:
        return _collection(collection, "PCIeDevice", "PCIe Device Collection", list(devices))
    found = devices.get(rest[0])
    if found is None or len(rest) > 3 or (len(rest) > 1 and rest[1] != "PCIeFunctions"):
        return None
    ident, maker, model, vendor, device, klass = found
    path = f"{collection}/{ident}"
    functions = f"{path}/PCIeFunctions"
    if len(rest) == 1:
        return {
            "@odata.id": path,
            "@odata.type": "#PCIeDevice.v1_11_0.PCIeDevice",
            "Id": ident,
            "Name": model,
            "Manufacturer": maker,
            "Model": model,
            "DeviceType": "SingleFunction",
            "PCIeFunctions": {"@odata.id": functions},
            "Status": {"State": "Enabled", "Health": "OK"},
        }
    if len(rest) == 2:
        return {
            "@odata.id": functions,
            "@odata.type": "#PCIeFunctionCollection.PCIeFunctionCollection",
            "Name": "PCIe Function Collection",
            "Members@odata.count": 1,
            "Members": [{"@odata.id": f"{functions}/0"}],
        }
    if rest[2] != "0":
        return None
    return {
        "@odata.id": f"{functions}/0",
        "@odata.type": "#PCIeFunction.v1_6_0.PCIeFunction",
        "Id": "0",
        "Name": f"{model} function 0",
        "FunctionId": 0,
        "FunctionType": "Physical",
        "DeviceClass": "DisplayController",
        "VendorId": vendor,
        "DeviceId": device,
        "ClassCode": klass,
        "Links": {"PCIeDevice": {"@odata.id": path}},
        "Status": {"State": "Enabled", "Health": "OK"},
    }
