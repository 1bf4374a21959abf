"""Per-machine figures at scrape time: power state, draw (counted and measured), and energy used
and saved as counters.

`MachineCollector` reads what `MachineTracker` last saw of each Node (its phase and the energy
account checkpointed in its status) and counts each account on to the scrape's time
(`Account.at`), so the counters move between checkpoints and carry on across restarts of the
operator (they come from status, not from this process's memory).

Units: energy in joules, the Prometheus base unit (`lightsout_energy_used_joules_total`; divide
by 3.6e6 for kWh), cost in the Group's currency (label `currency`). These series carry the
machine's name (`node`): one series per declared machine and metric, bounded by the fleet a
person declares (`make bench` measures the scrape at 1000 machines).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lightsout.metrics.machines import MachineTracker
from lightsout.models.enums import Phase

JOULES_PER_WATT_HOUR = 3600.0

#: `lightsout_machine_power_state`: one number per machine, so a Grafana state timeline can
#: show one row per machine (value mappings name them). Phases keep their own labels in
#: `lightsout_machines`.
POWER_STATE: dict[str, int] = {
    Phase.OFF: 0,
    Phase.POWERING_ON: 1,
    Phase.BOOTING: 1,
    Phase.PROVISIONING: 1,
    Phase.READY: 2,
    Phase.DRAINING: 3,
    Phase.POWERING_OFF: 3,
    Phase.DEPROVISIONING: 3,
    Phase.FAILED: 4,
    Phase.UNKNOWN: 5,
}
_STATE_HELP = (
    "Power state of each machine: 0 off, 1 powering on (PoweringOn, Booting, Provisioning), "
    "2 on (Ready), 3 powering off (Draining, PoweringOff, Deprovisioning), 4 failed, 5 unknown."
)
_LABELS = ["namespace", "group", "node"]


class MachineCollector(Collector):
    """`lightsout_machine_*` and `lightsout_energy_*` series, one per machine."""

    def __init__(
        self,
        tracker: MachineTracker,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.tracker = tracker
        self.clock = clock
        # The last value exported per series: status holds rounded figures, and a
        # counter must never go down (Prometheus would read a reset).
        self._exported: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def _counter(self, key: tuple[str, ...], value: float) -> float:
        with self._lock:
            value = max(value, self._exported.get(key, 0.0))
            self._exported[key] = value
            return value

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        state = GaugeMetricFamily("lightsout_machine_power_state", _STATE_HELP, labels=_LABELS)
        watts = GaugeMetricFamily(
            "lightsout_machine_power_watts",
            "What each machine draws now, estimated from its measured (else declared) idle and "
            "busy watts, phase and requested cpu: the rate its energy is counted at.",
            labels=_LABELS,
        )
        measured = GaugeMetricFamily(
            "lightsout_machine_measured_power_watts",
            "The draw each machine's controller (BMC, hypervisor, plug) reported at the last "
            "health check (status.power).",
            labels=[*_LABELS, "source"],
        )
        for namespace, name, group, reading, source in self.tracker.measured():
            measured.add_metric([namespace, group, name, source], reading)
        used = CounterMetricFamily(
            "lightsout_energy_used_joules",
            "Energy each machine drew since its accounting began (status.energy.since).",
            labels=_LABELS,
        )
        saved = CounterMetricFamily(
            "lightsout_energy_saved_joules",
            "Energy saved against the same machine left on idle all the time.",
            labels=_LABELS,
        )
        used_cost = CounterMetricFamily(
            "lightsout_energy_used_cost",
            "Price of the energy used, at the Group's electricity price, in its currency.",
            labels=[*_LABELS, "currency"],
        )
        saved_cost = CounterMetricFamily(
            "lightsout_energy_saved_cost",
            "Price of the energy saved, at the Group's electricity price, in its currency.",
            labels=[*_LABELS, "currency"],
        )
        live: set[tuple[str, ...]] = set()
        for namespace, name, group, phase, account, currency in self.tracker.machines():
            labels = [namespace, group, name]
            # (Phase is a StrEnum: the phase's text finds its member; any other is Unknown.)
            state.add_metric(labels, POWER_STATE.get(phase, POWER_STATE[Phase.UNKNOWN]))
            if account is None:
                continue
            current = account.at(now)
            watts.add_metric(labels, current.rate.watts)
            key: tuple[str, ...] = (namespace, name)
            live.add(key)
            total = current.total
            for family, part, joules in (
                (used, "u", total.used_wh * JOULES_PER_WATT_HOUR),
                (saved, "s", total.saved_wh * JOULES_PER_WATT_HOUR),
            ):
                family.add_metric(labels, self._counter((*key, part), joules))
            if currency:
                money = [*labels, currency]
                used_cost.add_metric(money, self._counter((*key, "uc"), total.used_cost))
                saved_cost.add_metric(money, self._counter((*key, "sc"), total.saved_cost))
        with self._lock:
            # A machine deleted and declared again starts its counters afresh.
            for key in [k for k in self._exported if k[:2] not in live]:
                del self._exported[key]
        yield from (state, watts, measured, used, saved, used_cost, saved_cost)
